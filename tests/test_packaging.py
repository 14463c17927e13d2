"""pyproject.toml's ranges and requirements.lock agree (docs/development.md,
"Dependencies"): every dependency and extra is locked at a version inside its range, torch
at 2.13.0 without a CUDA or CPU label, and this environment (installed from the lock by
`make`) is the lock, as scripts/lock.py --check says."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def locked() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            out[canonicalize_name(name)] = Version(version)
    return out


def requirements() -> list[tuple[str, Requirement]]:
    found = [("dependencies", Requirement(r)) for r in PROJECT["dependencies"]]
    for extra, reqs in PROJECT["optional-dependencies"].items():
        found += [(f"[{extra}]", Requirement(r)) for r in reqs]
    return [(where, r) for where, r in found if r.name != PROJECT["name"]]


def test_every_requirement_is_locked_inside_its_range():
    lock = locked()
    for where, req in requirements():
        if req.name == "s3fs":  # the s3 extra is not in `dev`: not installed, not locked
            continue
        version = lock.get(canonicalize_name(req.name))
        assert version is not None, f"{req} ({where}) is not in requirements.lock"
        assert req.specifier.contains(version, prereleases=True), \
            f"requirements.lock has {req.name}=={version}, outside {req} ({where})"


def test_runtime_ranges_have_a_floor_and_a_ceiling():
    for where, req in requirements():
        ops = {spec.operator for spec in req.specifier}
        assert ops == {"=="} or ">=" in ops, f"{req} ({where}): no floor"
        calendar = Version(next(iter(req.specifier)).version).major >= 2000
        assert ops & {"<", "=="} or calendar, f"{req} ({where}): no ceiling"


def test_torch_is_locked_at_the_tested_release_without_a_label():
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    assert "torch==2.13.0" in lines
    floor = next(r for _, r in requirements() if r.name == "torch")
    assert str(floor.specifier) == "<3,>=2.13.0"


def test_the_environment_is_the_lock():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "lock.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
