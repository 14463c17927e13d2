"""The package's layers (issue 22): the import-linter contract in pyproject.toml holds (no
import runs back up, no two packages import each other), and suggesting with a trained
hybrid project, from loading it to written predictions, never imports `tagalign.train`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tagalign.records.convert import write_jsonl

ROOT = Path(__file__).resolve().parents[1]


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import "
                           "lint_imports_command; sys.exit(lint_imports_command())"],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_import_layers_contract_holds() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def _lint_with(tmp_path: Path, module: str, addition: str) -> subprocess.CompletedProcess:
    """import-linter on a copy of the package in which ``module`` (a path under src/) has
    ``addition`` appended."""
    import shutil

    shutil.copytree(ROOT / "src", tmp_path / "src")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bad = tmp_path / "src" / module
    bad.write_text(bad.read_text() + addition)
    env_code = (f"import sys; sys.path.insert(0, {str(tmp_path / 'src')!r}); "
                "from importlinter.cli import lint_imports_command; "
                "sys.exit(lint_imports_command())")
    return subprocess.run([sys.executable, "-c", env_code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def test_contract_catches_an_import_back_up(tmp_path: Path) -> None:
    """The contract is not vacuous: a copy of the package in which `vocab` imports
    `recipes` inside a function (the way the old cycles hid) is refused."""
    result = _lint_with(tmp_path, "tagalign/vocab/subject.py",
                        "\n\ndef _up():\n    from tagalign.recipes import get_recipe"
                        "\n    return get_recipe\n")
    assert result.returncode != 0
    assert "tagalign.vocab.subject -> tagalign.recipes" in result.stdout


def test_contract_catches_serve_importing_a_recipe(tmp_path: Path) -> None:
    """The REST layer reaches recipes only through `Project` (even `ReadOnlyError` comes
    through `tagalign.project`): a `serve` module importing `tagalign.recipes` is refused."""
    result = _lint_with(tmp_path, "tagalign/serve/service.py",
                        "\n\ndef _recipe():\n    from tagalign.recipes import "
                        "ReadOnlyError\n    return ReadOnlyError\n")
    assert result.returncode != 0
    assert "tagalign.serve.service -> tagalign.recipes" in result.stdout


def test_contract_keeps_the_feedback_store_below_the_service(tmp_path: Path) -> None:
    """The feedback store is the library's (training and export read it without a server):
    a `feedback` module importing `tagalign.serve` is refused."""
    result = _lint_with(tmp_path, "tagalign/feedback/store.py",
                        "\n\ndef _serve():\n    from tagalign.serve import MAX_BODY"
                        "\n    return MAX_BODY\n")
    assert result.returncode != 0
    assert "tagalign.feedback.store -> tagalign.serve" in result.stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory, sample_case, sample_hybrid) -> tuple[Path, Path]:
    """The session's ``sample_hybrid`` (all five sources: tests/conftest.py) and 20 of its
    sample's dev records as a JSONL file."""
    dev = tmp_path_factory.mktemp("layers") / "dev.jsonl"
    write_jsonl(dev, sample_case[2][:20])
    return sample_hybrid, dev


def test_suggest_never_enters_train(trained, tmp_path: Path) -> None:
    """`tagalign suggest` in a fresh interpreter: predictions written, and no module of
    `tagalign.train` was imported on the way (the hybrid has an embedding encoder, Omikuji,
    neighbours, label matches and a ranker: every source it suggests with)."""
    project, dev = trained
    out = tmp_path / "pred.jsonl"
    code = (
        "import sys, json\n"
        "from tagalign.cli import app\n"
        "try:\n"
        f"    app([ 'suggest', {str(project)!r}, '--input', {str(dev)!r}, '--output', "
        f"{str(out)!r}, '--limit', '5'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tagalign.'))))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout.strip().splitlines()[-1])
    assert "tagalign.recipes.hybrid" in modules and "tagalign.predictions.tagging" in modules
    assert [m for m in modules if m.startswith("tagalign.train")] == []
    lines = out.read_text().splitlines()
    assert len(lines) == 20 and all(json.loads(x)["subjects"] for x in lines)
