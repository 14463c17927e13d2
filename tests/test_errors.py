"""One error base: every exception class of the package is a `TagalignError`, and the CLI's
one handler turns each into ``error: <message>`` and its exit code, without a traceback."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.errors import InputError, NotTrainedError, TagalignError, UsageError
from tagalign.project import Project
from tagalign.vocab import Vocabulary, load_vocabulary

SRC = Path(__file__).resolve().parents[1] / "src" / "tagalign"
#: classes another engineer re-bases (io.py) or that are not errors of ours (the Annif
#: API's problem document)
NOT_YET = {("tagalign.io", "LineError"), ("tagalign.io", "BadInputError"),
           ("tagalign.serve.annif", "Problem")}
runner = CliRunner()


def _exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every class in src/ whose bases name an Error or Exception."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(b).endswith(("Error", "Exception", "Mismatch"))
                    for b in node.bases):
                found.append((module, node.name))
    return found


def test_every_exception_class_is_a_tagalign_error():
    classes = _exception_classes()
    assert len(classes) > 20  # the scan is not vacuous
    strays = []
    for module, name in classes:
        if (module, name) in NOT_YET:
            continue
        cls = getattr(importlib.import_module(module), name)
        if not issubclass(cls, TagalignError):
            strays.append(f"{module}.{name}")
    assert not strays, strays


def test_the_not_trained_message_is_written_once():
    assert str(NotTrainedError("project p")) == \
        "project p is not trained yet; run `tagalign train`"
    hits = [p for p in SRC.rglob("*.py") if "not trained yet;" in p.read_text("utf-8")
            and "serve" not in p.parts and p.name != "hybrid.py"]
    assert [p.name for p in hits] == ["errors.py"]


def test_exit_codes():
    assert TagalignError.exit_code == 1 and NotTrainedError.exit_code == 1
    assert InputError.exit_code == 1 and UsageError.exit_code == 2


@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("untrained")
    (root / "v.tsv").write_text("4015065-3\tEpos\n4123065-6\tHeldenepos\n", "utf-8")
    vocab: Vocabulary = load_vocabulary(root / "v.tsv")
    Project.create(root / "p", vocab, "lexical")
    return root / "p"


def test_cli_maps_not_trained_to_one_line_and_its_exit_code(untrained):
    res = runner.invoke(app, ["suggest", str(untrained), "--title", "Epos"])
    assert res.exit_code == NotTrainedError.exit_code
    assert res.stderr.strip() == f"error: project {untrained} is not trained yet; run " \
                                 "`tagalign train`"
    assert "Traceback" not in res.output and not isinstance(res.exception, NotTrainedError)


def test_cli_maps_a_usage_error_to_exit_2(untrained, tmp_path):
    train = tmp_path / "t.jsonl"
    train.write_text('{"id": "a", "title": "Epos", "subjects": ["4015065-3"]}\n', "utf-8")
    res = runner.invoke(app, ["train", str(tmp_path / "q"), "--vocab", str(tmp_path / "v"),
                              "--train", str(train), "--recipe", "hybrid",
                              "--param", "holdout_fraction=1.5"])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and "Traceback" not in res.output


def test_cli_maps_an_input_error_to_exit_1(tmp_path):
    res = runner.invoke(app, ["detect-language", "x", "-l", "de,en,fr,it,es,nl"])
    assert res.exit_code == InputError.exit_code == 1
    assert res.stderr.strip() == "error: give 1 to 5 candidate languages, not 6"
