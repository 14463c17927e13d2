"""`tagalign train` / `tagalign suggest` through the CLI, on a tiny slice of shared data."""

from __future__ import annotations

import gzip
import json

from typer.testing import CliRunner

from tagalign.cli import app

runner = CliRunner()


def _slice(src, dst, n):
    with gzip.open(src, "rt", encoding="utf-8") as fh, open(dst, "w", encoding="utf-8") as out:
        for i, line in enumerate(fh):
            if i >= n:
                break
            out.write(line)


def test_train_suggest_roundtrip(shared_data, tmp_path):
    train = tmp_path / "train.jsonl"
    _slice(shared_data / "llms4subjects/train.jsonl.gz", train, 750)
    test = tmp_path / "test.jsonl"
    _slice(shared_data / "llms4subjects/dev.jsonl.gz", test, 30)
    with open(test, "a", encoding="utf-8") as fh:
        fh.write("{not json\n")  # reported with its line number, skipped
    proj = tmp_path / "proj"
    res = runner.invoke(app, [
        "train", str(proj), "--vocab", str(shared_data / "gnd/gnd-subjects.tsv.gz"),
        "--train", str(train), "--param", 'sources=["omikuji","tfidf_knn","lexical"]',
        "--param", "ranker_rounds=50"])
    assert res.exit_code == 0, res.output
    assert (proj / "model" / "recipe.json").exists()
    out = tmp_path / "pred.jsonl"
    res = runner.invoke(app, ["suggest", str(proj), "--input", str(test), "--output", str(out),
                              "--limit", "7"])
    assert res.exit_code == 0, res.output
    assert f"{test}:31" in res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 30
    first = lines[0]["subjects"]
    assert len(first) == 7 and {"id", "label", "score"} <= set(first[0])
    assert first[0]["score"] >= first[-1]["score"]


def test_suggest_errors_are_one_line(tmp_path):
    res = runner.invoke(app, ["suggest", str(tmp_path / "nope"), "--title", "x"])
    assert res.exit_code == 1
    assert "not a tagalign project" in res.output
    res = runner.invoke(app, ["train", str(tmp_path / "p"), "--train", str(tmp_path / "x.jsonl")])
    assert res.exit_code == 1 and "--vocab is needed" in res.output


def test_cli_starts_without_torch():
    """`tagalign --help` must stay fast: recipes (torch, sentence-transformers, LightGBM)
    are imported when a command needs one, not at start-up."""
    import subprocess
    import sys

    code = ("import sys, tagalign.cli.app; "
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'lightgbm') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    from tagalign.recipes import get_recipe, recipe_names

    assert {"hybrid", "ynu-finetune", "zero-shot"} <= set(recipe_names())
    assert get_recipe("lexical").name == "lexical"
