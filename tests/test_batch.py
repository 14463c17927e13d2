"""Batch tagging and encoding (`tagalign.batch`): local and Ray engines, shards, resume,
errors. Ray runs in this process (``ray_session``, tests/conftest.py: one start per session,
a small object store)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.project import Project
from tiny_models import static_model, tiny_records, tiny_vocab

runner = CliRunner()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A lexical project on the tiny vocabulary (trains instantly) and 120 records to tag."""
    root = tmp_path_factory.mktemp("batch")
    project = Project.create(root / "proj", tiny_vocab(), "lexical")
    project.train(tiny_records(40))
    write_jsonl(root / "in.jsonl", [r.to_json() for r in tiny_records(120, seed=1)])
    return root


def write_jsonl(path: Path, rows: list[dict], extra: str = "") -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
        fh.write(extra)
    return path


def shard_rows(out: Path, pattern: str = "part-*.jsonl") -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for part in sorted(out.glob(pattern)):
        for line in part.read_text("utf-8").splitlines():
            obj = json.loads(line)
            assert obj["id"] not in rows, f"{obj['id']} written twice"
            rows[obj["id"]] = obj
    return rows


def suggest(work: Path, src: Path, out: Path, *extra: str):
    result = runner.invoke(app, ["suggest", str(work / "proj"), "--input", str(src),
                                 "--output", str(out), "--shard-size", "40", "--limit", "5",
                                 *extra])
    return result


def test_import_and_cli_never_import_ray():
    code = ("import sys, tagalign, tagalign.cli, tagalign.batch, tagalign.batch.engines; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_engine_ray_without_ray_says_how_to_install(work, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    result = suggest(work, work / "in.jsonl", tmp_path / "out", "--engine", "ray")
    assert result.exit_code == 1
    assert "pip install 'tagalign[ray]'" in result.output
    assert not (tmp_path / "out").exists()


def test_ray_output_equals_local_record_for_record(work, tmp_path, ray_session):
    plain = tmp_path / "plain.jsonl"
    assert suggest(work, work / "in.jsonl", plain).exit_code == 0  # the one-file local path
    local = suggest(work, work / "in.jsonl", tmp_path / "local", "--format", "parquet")
    assert local.exit_code == 0, local.output
    ray_run = suggest(work, work / "in.jsonl", tmp_path / "ray", "--engine", "ray",
                      "--num-workers", "2")
    assert ray_run.exit_code == 0, ray_run.output
    expected = {json.loads(line)["id"]: json.loads(line)
                for line in plain.read_text("utf-8").splitlines()}
    got = shard_rows(tmp_path / "ray")
    assert len(got) == 120 and got == expected
    assert sum(1 for row in got.values() if row["subjects"]) > 100  # tags, not empty lists

    import pyarrow.parquet as pq

    from_parquet = {}
    for part in sorted((tmp_path / "local").glob("part-*.parquet")):
        for row in pq.read_table(part).to_pylist():
            for s in row["subjects"]:
                s["reasons"] = json.loads(s["reasons"])
                if not s["reasons"]:
                    del s["reasons"]
            from_parquet[row["id"]] = row
    assert from_parquet == expected

    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["totals"] == {"records_in": 120,
                                                           "records_out": 120, "errors": 0}
    assert [s["size"] for s in manifest["input"]["shards"]] == [40, 40, 40]
    assert manifest["runs"][-1]["engine"] == "ray" and manifest["runs"][-1]["workers"] == 2
    assert manifest["max_errored_blocks"] == 0 and manifest["fingerprint"]


def test_rerun_redoes_only_the_missing_shard(work, tmp_path, ray_session):
    from tagalign.batch import get_engine, run_batch

    spec = {"task": "suggest", "project": str(work / "proj"), "limit": 5}
    out = tmp_path / "out"
    first = run_batch(spec, work / "in.jsonl", out, get_engine("ray", num_workers=2),
                      shard_size=40)
    assert (first.shards_run, first.records_out) == (3, 120)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("part-*")}
    (out / "part-00001.jsonl").unlink()
    (out / ".part-00002.jsonl.x.tmp").write_text("half a shard of a killed worker")
    again = run_batch(spec, work / "in.jsonl", out, get_engine("ray", num_workers=2),
                      shard_size=40)
    assert (again.shards_run, again.shards_skipped, again.records_out) == (1, 2, 120)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("part-*")}
    assert after["part-00001.jsonl"][0] == before["part-00001.jsonl"][0]
    for name in ("part-00000.jsonl", "part-00002.jsonl"):  # untouched
        assert after[name] == before[name]
    assert not list(out.glob(".*.tmp"))

    # a shard whose file does not match the manifest (cut short) is redone, not half-kept
    part = out / "part-00002.jsonl"
    part.write_bytes(part.read_bytes()[:100])
    third = run_batch(spec, work / "in.jsonl", out, get_engine("local"), shard_size=40)
    assert (third.shards_run, third.shards_skipped) == (1, 2)
    assert part.read_bytes() == before["part-00002.jsonl"][0]


def test_poisoned_records_land_in_errors_with_their_reason(work, tmp_path, ray_session):
    rows = [r.to_json() for r in tiny_records(60, seed=2)]
    rows[17]["id"] = "broken-\ud800"  # a lone surrogate: valid JSON, not encodable as UTF-8
    src = write_jsonl(tmp_path / "poison.jsonl", rows, extra='{"id": "x", "title": 5}\n')
    out = tmp_path / "out"
    result = suggest(work, src, out, "--engine", "ray", "--num-workers", "2")
    assert result.exit_code == 0, result.output
    tagged = shard_rows(out)
    errors = [json.loads(line) for p in sorted(out.glob("errors-*.jsonl"))
              for line in p.read_text("utf-8").splitlines()]
    assert set(tagged) == {r["id"] for i, r in enumerate(rows) if i != 17}
    assert sum(1 for row in tagged.values() if row["subjects"]) > 50  # tagged, not empty
    by_stage = {e["stage"]: e for e in errors}
    assert len(errors) == 2
    assert by_stage["suggest"]["id"] == "broken-\ud800"
    assert "UnicodeEncodeError" in by_stage["suggest"]["reason"]
    assert by_stage["read"]["where"] == f"{src}:61"
    assert by_stage["read"]["reason"] == "missing 'title'"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["totals"] == {"records_in": 61, "records_out": 59, "errors": 2}


def test_ray_tags_records_in_worker_processes_not_the_driver(work, tmp_path, ray_session):
    """Each shard's summary names the process that tagged it: Ray actors, never this
    (driver) process; the local engine, this process. An engine that fell back to tagging
    in the driver would keep the name "ray" and the same output, and fail here."""
    import os

    from tagalign.batch import get_engine, run_batch

    spec = {"task": "suggest", "project": str(work / "proj"), "limit": 5}
    ray_run = run_batch(spec, work / "in.jsonl", tmp_path / "ray",
                        get_engine("ray", num_workers=2), shard_size=40)
    local_run = run_batch(spec, work / "in.jsonl", tmp_path / "local", get_engine("local"),
                          shard_size=40)
    assert ray_run.manifest["runs"][-1]["engine"] == "ray"
    assert shard_rows(tmp_path / "ray") == shard_rows(tmp_path / "local")
    ray_shards = ray_run.manifest["shards"]
    assert sorted(ray_shards) == ["00000", "00001", "00002"]
    assert sum(s["records_out"] for s in ray_shards.values()) == 120
    driver = os.getpid()
    ray_pids = {s["worker"]["pid"] for s in ray_shards.values()}
    assert driver not in ray_pids, ray_shards
    assert all(isinstance(pid, int) and pid > 0 for pid in ray_pids)
    assert {s["worker"]["pid"] for s in local_run.manifest["shards"].values()} == {driver}


def test_a_failing_record_costs_only_itself(work, tmp_path, monkeypatch):
    """The batch fails, so each record is retried alone; only the poisoned one fails."""
    from tagalign.batch import get_engine, run_batch
    from tagalign.recipes import get_recipe

    lexical = get_recipe("lexical")
    original = lexical.suggest

    def poisoned(self, records, limit=20):
        if any(r.title == "POISON" for r in records):
            raise RuntimeError("poisoned input")
        return original(self, records, limit)

    monkeypatch.setattr(lexical, "suggest", poisoned)
    rows = [r.to_json() for r in tiny_records(30, seed=3)]
    rows[4]["title"] = "POISON"
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    res = run_batch({"task": "suggest", "project": str(work / "proj"), "batch_size": 16},
                    src, tmp_path / "out", get_engine("local"), shard_size=100)
    assert (res.records_in, res.records_out, res.errors) == (30, 29, 1)
    (err,) = [json.loads(line) for line in
              (tmp_path / "out" / "errors-00000.jsonl").read_text().splitlines()]
    assert err["id"] == rows[4]["id"]
    assert err["reason"].startswith("RuntimeError: poisoned input")
    assert set(shard_rows(tmp_path / "out")) == {r["id"] for r in rows} - {rows[4]["id"]}


def test_rerun_with_other_settings_is_refused(work, tmp_path):
    out = tmp_path / "out"
    assert suggest(work, work / "in.jsonl", out, "--format", "parquet").exit_code == 0
    again = suggest(work, work / "in.jsonl", out, "--format", "parquet", "--threshold", "0.5")
    assert again.exit_code == 1
    assert "other settings" in again.output


def test_parquet_and_folder_inputs_shard_the_same_records(work, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tagalign.batch import plan_shards

    rows = [r.to_json() for r in tiny_records(120, seed=1)]
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows[:50]), folder / "a.parquet", row_group_size=10)
    write_jsonl(folder / "b.jsonl", rows[50:])
    assert [(Path(s.path).name, s.size) for s in plan_shards(folder, 40)] == [
        ("a.parquet", 40), ("a.parquet", 10), ("b.jsonl", 40), ("b.jsonl", 30)]
    out = tmp_path / "out"
    assert suggest(work, folder, out, "--format", "parquet").exit_code == 0
    ref = tmp_path / "ref"
    assert suggest(work, work / "in.jsonl", ref, "--format", "parquet").exit_code == 0
    read = lambda d: {r["id"]: r for p in sorted(d.glob("part-*.parquet"))  # noqa: E731
                      for r in pq.read_table(p).to_pylist()}
    assert read(out) == read(ref) and len(read(out)) == 120


def test_encode_local_and_ray_write_the_same_embeddings(work, tmp_path, ray_session):
    from tagalign.encode import get_encoder

    model = static_model(tmp_path / "static")
    spec = f"static:{model}"
    outs = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        result = runner.invoke(app, ["encode", spec, "--input", str(work / "in.jsonl"),
                                     "--output", str(out), "--shard-size", "50",
                                     "--engine", engine])
        assert result.exit_code == 0, result.output
        ids = sum((json.loads((out / f"ids-{i:05d}.json").read_text()) for i in range(3)), [])
        emb = np.concatenate([np.load(out / f"emb-{i:05d}.npy") for i in range(3)])
        outs[engine] = (ids, emb)
    assert outs["local"][0] == outs["ray"][0] == [f"r{i}" for i in range(120)]
    np.testing.assert_allclose(outs["local"][1], outs["ray"][1], atol=1e-6)
    texts = [r.text for r in tiny_records(120, seed=1)]
    direct = get_encoder(spec).encode(texts, kind="query")
    assert outs["local"][1].shape == (120, 16) and outs["local"][1].dtype == np.float32
    np.testing.assert_allclose(outs["local"][1], direct, atol=1e-6)


def test_encode_a_project_without_encoder_fails_in_one_line(work, tmp_path):
    result = runner.invoke(app, ["encode", str(work / "proj"), "--input",
                                 str(work / "in.jsonl"), "--output", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "has no encoder" in result.output
    bad = runner.invoke(app, ["encode", "nonsense-model", "--input", str(work / "in.jsonl"),
                              "--output", str(tmp_path / "o")])
    assert bad.exit_code == 1 and "neither a folder nor an encoder spec" in bad.output


def test_encode_a_vocabulary_writes_one_row_per_subject(work, tmp_path):
    from tagalign.encode import get_encoder

    spec = f"static:{static_model(tmp_path / 'static')}"
    out = tmp_path / "out"
    result = runner.invoke(app, ["encode", spec, "--vocabulary", "--input", str(work / "proj"),
                                 "--output", str(out), "--shard-size", "5"])
    assert result.exit_code == 0, result.output
    ids = json.loads((out / "ids-00000.json").read_text()) + json.loads(
        (out / "ids-00001.json").read_text())
    vocab = tiny_vocab()
    assert ids == [s.id for s in vocab]
    emb = np.concatenate([np.load(out / "emb-00000.npy"), np.load(out / "emb-00001.npy")])
    labels = [s.label("de") for s in vocab]
    np.testing.assert_allclose(emb, get_encoder(spec).encode(labels, kind="passage"),
                               atol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"]["source"] == "vocabulary:de" and manifest["totals"]["errors"] == 0


def test_bad_project_or_input_fails_in_one_line(work, tmp_path):
    Project.create(tmp_path / "untrained", tiny_vocab(), "lexical")
    result = runner.invoke(app, ["suggest", str(tmp_path / "untrained"), "--input",
                                 str(work / "in.jsonl"), "--output", str(tmp_path / "o"),
                                 "--engine", "ray"])
    assert result.exit_code == 1 and "not trained yet" in result.output
    missing = suggest(work, tmp_path / "nope.jsonl", tmp_path / "o", "--format", "parquet")
    assert missing.exit_code == 1
    assert missing.output.strip() == f"error: input not found: {tmp_path / 'nope.jsonl'}"


def test_a_file_added_deep_in_a_jsonld_tree_stops_a_resume(work, tmp_path, shared_data):
    """Issue 30: a JSON-LD folder is one input whose shards are ranges counted from its
    start; a file added in a subfolder (the top folder's size and time unchanged) would
    shift the shards still to run, so the resume is refused instead."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(shared_data / "llms4subjects/jsonld-sample", tree)
    out = tmp_path / "out"
    assert suggest(work, tree, out, "--format", "parquet").exit_code == 0
    again = suggest(work, tree, out, "--format", "parquet")
    assert again.exit_code == 0  # unchanged: a resume with nothing left to do
    top = tree.stat().st_mtime_ns
    deep = sorted(tree.rglob("*.jsonld"))[0]
    shutil.copy(deep, deep.with_name("added-" + deep.name))
    assert tree.stat().st_mtime_ns == top  # what the check looked at before
    changed = suggest(work, tree, out, "--format", "parquet")
    assert changed.exit_code == 1
    assert "input changed" in changed.output


def test_two_runs_on_one_output_folder_are_not_allowed(work, tmp_path):
    """Issue 30: a second run on an output folder another run holds is refused at once
    (the lock is the kernel's, so a killed run never leaves it held)."""
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = suggest(work, work / "in.jsonl", out, "--format", "parquet")
        assert busy.exit_code == 1 and "another run is writing" in busy.output
        assert not (out / "manifest.json").exists()
    assert suggest(work, work / "in.jsonl", out, "--format", "parquet").exit_code == 0
    assert len(list(out.glob("part-*.parquet"))) == 3
