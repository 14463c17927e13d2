"""`tagalign vocab`, `records stats` and the JSON-LD → JSONL conversion (no network)."""

from __future__ import annotations

import gzip
import json

from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.records.convert import convert_tree

runner = CliRunner()


def test_vocab_load_and_show(tmp_path):
    src = tmp_path / "subjects.tsv"
    src.write_text("<http://d-nb.info/gnd/4015065-3>\tEpos\n<gnd:4123065-6>\tDigitalisierung\n")
    res = runner.invoke(app, ["vocab", "load", str(src), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert "2 subjects loaded" in res.output
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "4015065-3"])
    assert res.exit_code == 0 and "Epos" in res.output
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "--search", "digital"])
    assert "4123065-6" in res.output
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "1-1"])
    assert res.exit_code == 1 and "not in the vocabulary" in res.output
    res = runner.invoke(app, ["vocab", "load", str(tmp_path / "missing.tsv"), "--out", "x"])
    assert res.exit_code == 1 and "not found" in res.output


def test_records_stats_on_jsonld_sample(shared_data):
    res = runner.invoke(app, ["records", "stats", str(shared_data / "llms4subjects/jsonld-sample")])
    assert res.exit_code == 0, res.output
    assert "59" in res.output and "Thesis" in res.output


def test_convert_jsonld_tree(shared_data, tmp_path):
    counts = convert_tree(shared_data / "llms4subjects/jsonld-sample", tmp_path)
    assert sum(counts.values()) == 59 and set(counts) <= {"train", "dev"}
    split = next(iter(counts))
    with gzip.open(tmp_path / f"{split}.jsonl.gz", "rt") as fh:
        first = json.loads(fh.readline())
    assert first["split"] == split and first["subjects"] and first["title"]
