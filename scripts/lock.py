"""Write (or check) requirements.lock: the exact versions of ``tagalign[dev]`` and everything
it pulls in, read from the environment this runs in (the .venv that `make` installs).

    .venv/bin/python scripts/lock.py           # rewrite requirements.lock from .venv
    .venv/bin/python scripts/lock.py --check   # exit 1 if .venv and the lock differ

It walks the installed distributions from tagalign's own requirements (with the ``dev``
extra, markers evaluated for this interpreter), as pip-tools would from an index, so a
package installed by hand beside them does not enter the lock. To move a dependency:
``pip install -U NAME`` in .venv (within pyproject.toml's range), run the tests, then this.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
HEADER = """\
# The exact versions tagalign is tested with: tagalign[dev] and everything it pulls in.
# Written by scripts/lock.py from the .venv that `make` installs (docs/development.md,
# "Dependencies"); installed as constraints:
#   pip install -c requirements.lock -e '.[dev]'      the Makefile (CI runs `make test`)
#   pip install -c requirements.lock '/src[postgres]'  the Containerfile
#   scripts/wheel-check.sh                             the built wheel in a fresh venv
# torch without its local label: ==2.13.0 is the CPU build where that is installed or
# offered (PyTorch's CPU index, this machine's wheel), never a newer CUDA build.
"""


def project_requirements(extras: tuple[str, ...] = ("dev",)) -> list[Requirement]:
    """pyproject.toml's dependencies and those of ``extras`` (read from the file, not from
    the installed metadata: an editable install keeps what it was installed with)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    out = [Requirement(r) for r in project["dependencies"]]
    todo, done = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        done.add(extra)
        for line in optional[extra]:
            req = Requirement(line)
            if canonicalize_name(req.name) == canonicalize_name(project["name"]):
                todo.extend(req.extras)  # tagalign[tune,...] inside an extra
            else:
                out.append(req)
    return out


def closure(extras: tuple[str, ...] = ("dev",)) -> dict[str, str]:
    """Installed name → version of every distribution tagalign[extras] needs."""
    seen: dict[str, str] = {}
    todo = [(r.name, frozenset(r.extras)) for r in project_requirements(extras)
            if r.marker is None or r.marker.evaluate({"extra": ""})]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        key = (canonicalize_name(name), wanted)
        if key in done:
            continue
        done.add(key)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            sys.exit(f"{name} is required but not installed: run `make` first")
        seen[dist.metadata["Name"]] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return seen


def lock_text(pins: dict[str, str]) -> str:
    lines = []
    for name, version in sorted(pins.items(), key=lambda kv: canonicalize_name(kv[0])):
        if canonicalize_name(name) == "torch":
            version = version.split("+")[0]
        lines.append(f"{name}=={version}")
    return HEADER + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with requirements.lock instead of writing it")
    args = parser.parse_args()
    text = lock_text(closure())
    if not args.check:
        LOCK.write_text(text)
        print(f"wrote {LOCK} ({text.count('==')} packages)")
        return
    old = set(LOCK.read_text().splitlines()) - set(HEADER.splitlines())
    new = set(text.splitlines()) - set(HEADER.splitlines())
    if old != new:
        for line in sorted(old - new):
            print(f"lock has      {line}")
        for line in sorted(new - old):
            print(f"installed has {line}")
        sys.exit("requirements.lock and this environment differ: run scripts/lock.py after "
                 "a deliberate change, or `make` to install the lock")
    print(f"{LOCK.name} matches this environment ({len(new)} packages)")


if __name__ == "__main__":
    main()
