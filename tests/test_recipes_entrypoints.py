"""Every recipe through the three public entry points: `tagalign train`, `tagalign suggest`
and `benchmarks/run_tagging.py --recipe NAME` (tiny models and records built here; hybrid
through the CLI is in test_cli_train.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks import run_tagging
from tagalign.cli import app
from tagalign.records.convert import write_jsonl
from tiny_models import static_model, tiny_bert, tiny_records, tiny_vocab

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("entry")
    vocab = tiny_vocab()
    paths = {"vocab": vocab.save(root), "train": root / "train.jsonl",
             "test": root / "test.jsonl", "static": static_model(root / "static"),
             "bert": tiny_bert(root / "bert")}
    write_jsonl(paths["train"], tiny_records(64))
    write_jsonl(paths["test"], tiny_records(10, seed=7))
    return paths, {s.id for s in vocab.subjects}


def _params(recipe: str, files: dict, cache: Path) -> dict:
    static = {"encoder": f"static:{files['static']}", "cache_dir": str(cache)}
    head = {**static, "epochs": 1, "batch_size": 16, "negatives": 4}
    return {
        "lexical": {},
        "zero-shot": static,
        "nbf-attention": head,
        "focused-transform": {**head, "hidden": 32},
        "ynu-finetune": {"base_model": f"st:{files['bert']}", "epochs": 1, "batch_size": 16,
                         "max_seq_length": 48, "subjects": "seen", "cache_dir": str(cache)},
    }[recipe]


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def _check(rows: list[dict], recipe: str, ids: set[str]) -> None:
    """Four known subjects per record, best first (lexical suggests only labels it finds
    in the text, so up to four, and some)."""
    sizes = [len(r["subjects"]) for r in rows]
    assert all(n <= 4 for n in sizes) and sum(sizes) > 0
    if recipe != "lexical":
        assert set(sizes) == {4}
    for r in rows:
        assert {s["id"] for s in r["subjects"]} <= ids
        scores = [s["score"] for s in r["subjects"]]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("recipe", ["lexical", "zero-shot", "nbf-attention",
                                    "focused-transform", "ynu-finetune"])
def test_recipe_through_cli_and_run_tagging(tmp_path, files, recipe):
    paths, ids = files
    params = _params(recipe, paths, tmp_path / "cache")
    config = tmp_path / "params.json"
    config.write_text(json.dumps(params))
    test_ids = [r["id"] for r in _read(paths["test"])]

    proj = tmp_path / "proj"
    res = runner.invoke(app, ["train", str(proj), "--vocab", str(paths["vocab"]),
                              "--train", str(paths["train"]), "--recipe", recipe,
                              "--config", str(config)])
    assert res.exit_code == 0, res.output
    saved = json.loads((proj / "project.json").read_text())
    model = json.loads((proj / "model" / "recipe.json").read_text())  # the params' one copy
    assert (saved["recipe"], model["recipe"]) == (recipe, recipe) and "params" not in saved
    assert {k: model["params"][k] for k in params} == params
    out = tmp_path / "cli.jsonl"
    res = runner.invoke(app, ["suggest", str(proj), "--input", str(paths["test"]),
                              "--output", str(out), "--limit", "4"])
    assert res.exit_code == 0, res.output
    rows = _read(out)
    assert [r["id"] for r in rows] == test_ids
    _check(rows, recipe, ids)

    out2 = tmp_path / "run.jsonl"
    rc = run_tagging.main(["--train", str(paths["train"]), "--vocab", str(paths["vocab"]),
                           "--test", str(paths["test"]), "--out", str(out2), "--recipe",
                           recipe, "--config", str(config), "--limit", "4",
                           "--project-dir", str(tmp_path / "run")])
    assert rc == 0
    assert json.loads((tmp_path / "run" / "project.json").read_text())["recipe"] == recipe
    rows2 = _read(out2)
    assert [r["id"] for r in rows2] == test_ids
    _check(rows2, recipe, ids)


def test_run_tagging_param_errors_are_one_line(files, tmp_path, capsys):
    paths, _ = files
    rc = run_tagging.main(["--train", str(paths["train"]), "--vocab", str(paths["vocab"]),
                           "--test", str(paths["test"]), "--out", str(tmp_path / "o.jsonl"),
                           "--recipe", "zero-shot", "--param", "encoder"])
    assert rc == 1
    assert "expected key=value" in capsys.readouterr().err
