"""Batch runs a new user trips over (issue 23): `encode` of a trained hybrid project, a run
whose records fail is a failed run (not a "complete" folder of empty shards), shards sized
for the workers, no Ray start with nothing left to do, one display (no Ray notices)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tagalign.batch import BatchError, get_engine, run_batch
from tagalign.batch.engines import Engine, _without_level_notice
from tagalign.batch.inputs import choose_shard_size, plan_shards
from tagalign.cli import app
from tagalign.project import Project
from tiny_models import tiny_records, tiny_vocab

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
#: a hybrid small enough to train in seconds: its own static encoder and two sources
TINY_HYBRID = {"sources": ["emb_knn", "lexical"], "embed_vocab_size": 300, "embed_dim": 16,
               "embed_batch_size": 32, "embed_label_pairs": False, "ranker_rounds": 20,
               "holdout_fraction": 0.25, "knn_k": 5, "ann_index": "flat"}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("enc")
    Project.create(root / "hybrid", tiny_vocab(), "hybrid", TINY_HYBRID).train(
        tiny_records(120))
    Project.create(root / "lexical", tiny_vocab(), "lexical").train(tiny_records(40))
    write_jsonl(root / "in.jsonl", [r.to_json() for r in tiny_records(30, seed=5)])
    return root


def encode(work: Path, src: Path, out: Path, *extra: str):
    return runner.invoke(app, ["encode", str(work / "hybrid"), "--input", str(src),
                               "--output", str(out), *extra])


# -- item 1 ----------------------------------------------------------------------------
def test_encode_of_a_trained_hybrid_writes_its_encoders_embeddings(work, tmp_path):
    res = encode(work, work / "in.jsonl", tmp_path / "emb")
    assert res.exit_code == 0, res.stderr
    assert not (tmp_path / "emb" / "errors-00000.jsonl").exists()
    ids = json.loads((tmp_path / "emb" / "ids-00000.json").read_text())
    emb = np.load(tmp_path / "emb" / "emb-00000.npy")
    records = tiny_records(30, seed=5)
    assert ids == [r.id for r in records]
    encoder = Project.load(work / "hybrid").recipe.pipeline.encoder
    want = encoder.encode([r.text for r in records], kind="query")
    assert emb.shape == (30, 16) and np.allclose(emb, want, atol=1e-6)
    manifest = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["totals"]["errors"] == 0


def test_a_run_in_which_every_record_failed_fails_and_is_not_complete(work, tmp_path):
    rows = [r.to_json() for r in tiny_records(30, seed=5)]
    for row in rows:  # lone surrogates: valid JSON, no embedding file can hold these ids
        row["id"] += "-\ud800"
    src = write_jsonl(tmp_path / "bad.jsonl", rows)
    res = encode(work, src, tmp_path / "emb")
    assert res.exit_code == 1
    assert "1 of 1 shards failed" in res.stderr and "UnicodeEncodeError" in res.stderr
    manifest = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["shards"] == {}
    assert manifest["failed"]["00000"]["errors"] == 30
    again = encode(work, src, tmp_path / "emb")  # the shard is not skipped: run again
    assert again.exit_code == 1 and "1 shards run" in again.stderr


def test_max_errors_sets_the_share_of_failed_records_a_shard_may_have(work, tmp_path):
    rows = [r.to_json() for r in tiny_records(30, seed=5)]
    rows[3]["id"] += "-\ud800"  # 1 of 30 records: 3.3 %
    src = write_jsonl(tmp_path / "one-bad.jsonl", rows)
    spec = {"task": "suggest", "project": str(work / "lexical")}
    ok = run_batch(spec, src, tmp_path / "a", get_engine("local"))  # default 5 %
    assert (ok.records_out, ok.errors, ok.failed) == (29, 1, {})
    assert ok.manifest["complete"]
    strict = run_batch(spec, src, tmp_path / "b", get_engine("local"), max_errors=0.01)
    assert list(strict.failed) == ["00000"] and not strict.manifest["complete"]
    res = runner.invoke(app, ["suggest", str(work / "lexical"), "--input", str(src),
                              "--output", str(tmp_path / "c"), "--format", "parquet",
                              "--max-errors", "0.01"])
    assert res.exit_code == 1 and "more than 1% of their records" in res.stderr


# -- item 10: batch ----------------------------------------------------------------------
class Refusing(Engine):
    name = "refusing"

    def run(self, shards, spec, out, on_done):
        raise AssertionError("the engine must not start when nothing is left to do")


def test_a_rerun_with_nothing_left_does_not_start_the_engine(work, tmp_path):
    spec = {"task": "suggest", "project": str(work / "lexical")}
    first = run_batch(spec, work / "in.jsonl", tmp_path / "out", get_engine("local"))
    again = run_batch(spec, work / "in.jsonl", tmp_path / "out", Refusing())
    assert (again.shards_run, again.shards_skipped) == (0, first.shards_total)


def test_the_other_settings_refusal_names_the_setting(work, tmp_path):
    spec = {"task": "suggest", "project": str(work / "lexical"), "threshold": 0.0}
    run_batch(spec, work / "in.jsonl", tmp_path / "out", get_engine("local"))
    with pytest.raises(BatchError, match=r"other settings: threshold was 0\.0, now 0\.5;"):
        run_batch({**spec, "threshold": 0.5}, work / "in.jsonl", tmp_path / "out",
                  get_engine("local"))


def test_shards_are_sized_for_the_workers(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [r.to_json() for r in tiny_records(200)])
    assert [s.size for s in plan_shards(src, None, workers=2)] == [50, 50, 50, 50]
    assert [s.size for s in plan_shards(src, 120)] == [120, 80]
    assert choose_shard_size(1_000_000, 2) == 5000 and choose_shard_size(10, 8) == 50
    assert choose_shard_size(2000, 2) == 250


# -- item 5: one display -------------------------------------------------------------------
def test_the_ray_level_notice_is_dropped_and_other_output_kept(capfd):
    with _without_level_notice():
        os.write(2, b"[I 1] logging.cc:303: Set ray log level from environment variable "
                    b"RAY_BACKEND_LOG_LEVEL to 3\nreal trouble\n")
    assert capfd.readouterr().err == "real trouble\n"


def test_encode_on_ray_uses_two_workers_and_prints_only_our_display(work, tmp_path):
    pytest.importorskip("ray")
    src = write_jsonl(tmp_path / "in.jsonl", [r.to_json() for r in tiny_records(200)])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "tests")]), "COLUMNS": "200"}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "tagalign.cli.main", "encode", str(work / "hybrid"),
           "--input", str(src), "--output", str(tmp_path / "emb"), "--engine", "ray",
           "--num-workers", "2"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert "logging.cc" not in res.stderr and "RAY_BACKEND_LOG_LEVEL" not in res.stderr
    assert "4 shards run: 200 records written, 0 errors, 2 worker(s)" in res.stderr
