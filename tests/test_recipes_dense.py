"""zero-shot, R2 and R3 on a real StaticEmbedding model built here (the fake-encoder tests
are in test_recipes_r2_r3.py, R1 in test_recipe_r1.py): training lowers the loss, save →
load gives identical suggestions, per-language routing works, exports through the CLI."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from suggesting import suggestions
from tagalign.project import Project
from tiny_models import static_model, tiny_records, tiny_vocab, write_tiny_vocab


@pytest.fixture(scope="module")
def static_folder(tmp_path_factory):
    return static_model(tmp_path_factory.mktemp("static") / "m")


def _roundtrip(tmp_path, recipe_name, params, records):
    vocab = tiny_vocab()
    project = Project.create(tmp_path / "p", vocab, recipe_name, params)
    recipe = project.train(records)
    test = tiny_records(10, seed=7)
    before = suggestions(project, test, limit=5)
    copy = tmp_path / "copy"
    shutil.copytree(project.path, copy)
    after = suggestions(Project.load(copy), test, limit=5)
    assert [[(s.id, round(s.score, 5)) for s in r] for r in before] == \
        [[(s.id, round(s.score, 5)) for s in r] for r in after]
    assert all(len(r) == 5 for r in before)
    return recipe, before, test


def recall_at(rows, records, k=2):
    return np.mean([len(set(r.subjects) & {s.id for s in row[:k]}) / len(r.subjects)
                    for r, row in zip(records, rows, strict=True)])


def test_zero_shot(tmp_path, static_folder):
    params = {"encoder": f"static:{static_folder}", "cache_dir": str(tmp_path / "cache")}
    _roundtrip(tmp_path, "zero-shot", params, tiny_records(40))


@pytest.mark.parametrize("name, extra", [
    ("nbf-attention", {"epochs": 6, "batch_size": 16, "lr": 3e-3, "t_max": 6}),
    ("focused-transform", {"epochs": 8, "batch_size": 16, "lr": 1e-2, "hidden": 32}),
])
def test_heads_learn_and_roundtrip(tmp_path, static_folder, name, extra):
    params = {"encoder": f"static:{static_folder}", "cache_dir": str(tmp_path / "cache"),
              "negatives": 4, **extra}
    recipe, rows, test = _roundtrip(tmp_path, name, params, tiny_records(160))
    losses = recipe.losses_
    assert losses[-1] < losses[0] * 0.9, losses
    if name == "focused-transform" and extra.get("mode") != "bilingual":
        assert set(recipe.models_) == {"de", "en"}
        assert {recipe.route(r) for r in test} == {r.language for r in test}


def test_exports_vectors_and_pairs(tmp_path, static_folder):
    import csv
    import json

    from typer.testing import CliRunner

    from tagalign.cli import app

    params = {"encoder": f"static:{static_folder}", "cache_dir": str(tmp_path / "cache"),
              "negatives": 4, "epochs": 2, "batch_size": 16, "hidden": 16}
    project = Project.create(tmp_path / "r3", tiny_vocab(), "focused-transform", params)
    project.train(tiny_records(60))
    out = tmp_path / "subjects.jsonl"
    res = CliRunner().invoke(app, ["export", "vectors", str(project.path), "--out", str(out),
                                   "--model", "en"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and len(rows[0]["vector"]) == 16
    assert {r["label"] for r in rows} >= {"neural", "fungi"}  # English labels for the en model
    recs = tmp_path / "recs.jsonl"
    recs.write_text("".join(json.dumps(r.to_json()) + "\n" for r in tiny_records(3)))
    vocab_file = write_tiny_vocab(tmp_path / "v.tsv")
    pairs = tmp_path / "pairs.csv"
    res = CliRunner().invoke(app, ["export", "pairs", str(recs), "--vocab", str(vocab_file),
                                   "--out", str(pairs)])
    assert res.exit_code == 0, res.output
    table = list(csv.DictReader(pairs.open()))
    assert len(table) == 3 and json.loads(table[0]["subject_ids"]) == tiny_records(3)[0].subjects
