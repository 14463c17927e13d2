"""The documentation: docs/ builds with `mkdocs build --strict` (a broken link or anchor, or
a page missing from mkdocs.yml's nav, fails), README.md stays a short entry point, and every
benchmark script the docs name exists and is in the index, benchmarks/README.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; move text to docs/"


def test_readme_links_into_docs_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((docs/[^)#\s]*)", text)
    assert targets, "README.md links into docs/"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()


BENCHMARKS = ROOT / "benchmarks"
#: a path under benchmarks/ (a script or a folder) and a module run with ``python -m``
BENCHMARK_PATH = re.compile(r"(?<![\w./])benchmarks/((?:[a-z0-9_]+/)*(?:[a-z0-9_]+\.py)?)")
BENCHMARK_MODULE = re.compile(r"python -m (benchmarks(?:\.[a-z0-9_]+)+)")
#: the commit the docs send a reader to for a removed script
REMOVED_AT = "6a2d4a2"


def _removed_scripts() -> set[str]:
    """The scripts benchmarks/README.md lists as removed (its last table: `NAME.py`)."""
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    removed = index.split("## Removed", 1)[1]
    return set(re.findall(r"^\| `([a-z0-9_]+\.py)` \|", removed, re.M))


def _doc_files() -> list[Path]:
    return [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", BENCHMARKS / "README.md"]


def test_benchmark_paths_named_in_the_docs_exist() -> None:
    """Every script, folder or module of benchmarks/ the docs name exists — or is a removed
    experiment of the index whose page says which commit to check it out of, or a file a
    `git checkout 6a2d4a2 -- …` of the docs takes out of that commit."""
    removed = _removed_scripts()
    assert removed, "benchmarks/README.md lists the removed scripts"
    missing = []
    for doc in _doc_files():
        text = doc.read_text(encoding="utf-8")
        checkouts = " ".join(re.findall(rf"`git checkout {REMOVED_AT} -- ([^`]*)`", text)).split()
        for rel in set(BENCHMARK_PATH.findall(text)) - {""}:
            if (BENCHMARKS / rel).exists():
                continue
            if not (rel in removed and REMOVED_AT in text or f"benchmarks/{rel}" in checkouts):
                missing.append(f"{doc.relative_to(ROOT)}: benchmarks/{rel}")
        for module in set(BENCHMARK_MODULE.findall(text)):
            path = ROOT.joinpath(*module.split("."))
            if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
                missing.append(f"{doc.relative_to(ROOT)}: python -m {module}")
    assert not missing, missing


def test_benchmarks_index_names_every_script() -> None:
    """benchmarks/README.md names every script there is (a module run as ``__main__``; a
    package run with ``-m`` by its folder), and no removed one is still there."""
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    unnamed = []
    for path in sorted(BENCHMARKS.rglob("*.py")):
        if 'if __name__ == "__main__":' not in path.read_text(encoding="utf-8"):
            continue
        rel = path.parent if path.name == "__main__.py" else path
        name = rel.relative_to(ROOT).as_posix() + ("/" if rel.is_dir() else "")
        if f"`{name}`" not in index:
            unnamed.append(name)
    assert not unnamed, f"benchmarks/README.md does not name {unnamed}"
    assert not [n for n in _removed_scripts() if list(BENCHMARKS.rglob(n))]
