"""Ray batch workers under real faults (issue 46; a server's worker killed for its memory
is tests/test_serve_workers.py's, which shares that file's server):

- a Ray worker killed with SIGKILL in the middle of a shard: Ray runs the shard again on a
  new worker, and the output equals the local engine's, no record lost or doubled;
- Ray shards written to a full disk (a small tmpfs): the run stops with the worker's own
  ``OSError`` (ENOSPC), the shards the manifest lists are whole, no temporary file is left,
  and a rerun completes once space is freed.

Both Ray tests share the session's in-process Ray (``ray_session``, tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tagalign.project import Project
from test_batch import shard_rows, write_jsonl
from tiny_models import tiny_records, tiny_vocab

#: seconds a run may take on a loaded machine
T = 120


@pytest.fixture(scope="module")
def batch_work(tmp_path_factory) -> Path:
    """A lexical project on the tiny vocabulary, 3,000 records to tag and what the local
    engine writes for them (the reference: Ray's output equals it, tests/test_batch.py)."""
    from tagalign.batch import get_engine, run_batch

    root = tmp_path_factory.mktemp("ray-faults")
    Project.create(root / "proj", tiny_vocab(), "lexical").train(tiny_records(40))
    write_jsonl(root / "in.jsonl", [r.to_json() for r in tiny_records(3000, seed=4)])
    run_batch(SPEC(root), root / "in.jsonl", root / "ref", get_engine("local"),
              shard_size=1000)
    return root


def SPEC(root: Path) -> dict:  # noqa: N802 - the one spec of this file's runs
    # small batches: a shard reads its input for most of its time (the kill's signal)
    return {"task": "suggest", "project": str(root / "proj"), "limit": 5, "batch_size": 8}


def ray_workers() -> list:
    """Ray's processes below this one (the session's in-process Ray): each names itself
    ``ray::…`` (``ray::IDLE``, ``ray::MapWorker(…)``)."""
    import psutil

    out = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error, IndexError):
            if proc.cmdline()[0].startswith("ray::"):
                out.append(proc)
    return out


def reading(proc, path: Path) -> bool:
    import psutil

    try:
        return any(f.path == str(path) for f in proc.open_files())
    except psutil.Error:
        return False


def test_a_ray_worker_killed_mid_shard_leaves_the_output_whole(batch_work, tmp_path,
                                                                ray_session):
    from tagalign.batch import get_engine, run_batch

    src, out = batch_work / "in.jsonl", tmp_path / "out"
    result: dict = {}
    run = threading.Thread(target=lambda: result.update(res=run_batch(
        SPEC(batch_work), src, out, get_engine("ray", num_workers=1), shard_size=1000)))
    run.start()
    killed = None
    deadline = time.time() + 120
    while killed is None and run.is_alive():  # a worker reading a shard's records
        assert time.time() < deadline
        for proc in ray_workers():
            if reading(proc, src):
                proc.send_signal(signal.SIGSTOP)  # held: it cannot finish the shard now
                if reading(proc, src):
                    proc.send_signal(signal.SIGKILL)
                    killed = proc.pid
                    break
                proc.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    run.join(T)
    assert killed is not None, "the run ended before a worker was caught mid-shard"
    assert "res" in result, "the run failed (its error is above): the shard was not retried"
    res = result["res"]
    assert (res.shards_run, res.records_in, res.records_out, res.errors) == (3, 3000, 3000, 0)
    assert shard_rows(out) == shard_rows(batch_work / "ref")  # shard_rows: nothing twice
    workers = {s["worker"]["pid"] for s in res.manifest["shards"].values()}
    assert workers - {killed}  # a new worker did the killed one's shard
    assert res.manifest["complete"] and not list(out.glob(".*.tmp"))


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test (root only)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a size-limited tmpfs")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"the kernel refused a tmpfs: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_ray_shards_on_a_full_disk_stop_with_the_error_and_resume(batch_work, small_disk,
                                                                   ray_session):
    from tagalign.batch import get_engine, run_batch

    src, out = batch_work / "in.jsonl", small_disk / "out"
    ref = batch_work / "ref"
    shard = max(p.stat().st_size for p in ref.glob("part-*.jsonl"))
    st = os.statvfs(small_disk)
    # room for about one and a half shards (and the manifest): the second shard fails
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - int(1.5 * shard) - 16384))
    with pytest.raises(OSError) as raised:
        run_batch(SPEC(batch_work), src, out, get_engine("ray", num_workers=1),
                  shard_size=1000)
    exc = raised.value
    assert exc.errno == errno.ENOSPC, repr(exc)
    assert type(exc).__module__.split(".")[0] != "ray"  # the worker's, out of Ray's wrapper
    manifest = json.loads((out / "manifest.json").read_text())
    # the shard that finished before the disk filled is kept: which one that is, Ray's
    # scheduling decides (not always 00000, seen on a busy machine)
    assert not manifest.get("complete") and len(manifest["shards"]) >= 1
    for sid in manifest["shards"]:  # whatever it lists is whole
        name = f"part-{sid}.jsonl"
        assert (out / name).read_bytes() == (ref / name).read_bytes()
    assert not list(out.glob(".*.tmp"))  # no half shard left behind

    filler.unlink()  # space freed: the same run again completes (locally: Ray's part is done)
    again = run_batch(SPEC(batch_work), src, out, get_engine("local"), shard_size=1000)
    assert again.shards_run + again.shards_skipped == 3 and again.manifest["complete"]
    assert again.shards_skipped == len(manifest["shards"])
    assert shard_rows(out) == shard_rows(ref)


def test_a_manifest_write_refused_by_a_full_disk_is_tried_again(batch_work, tmp_path,
                                                                 monkeypatch):
    """The race the Ray test above can meet on a busy machine, made certain: the disk fills
    while the driver records shard 00000 (the worker's next shard filling it meanwhile),
    then that next shard fails with ENOSPC. The run raises the shard's error and the
    manifest still lists 00000 (written again once the failed shard's file is gone); a
    refusal the next write gets past loses nothing either."""
    import tagalign.batch.run as run_module
    from tagalign.batch import get_engine, run_batch
    from tagalign.batch.tasks import ShardWorker

    src, ref = batch_work / "in.jsonl", batch_work / "ref"
    real_write, real_run = run_module.write_json_atomic, ShardWorker.run
    full = {"manifest_writes": 0, "shard": "00001"}

    def write(path, data):
        full["manifest_writes"] += 1
        if full["manifest_writes"] == 2:  # the first shard's record (the plan is the 1st)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, data)

    def run(self, shard):
        if shard.id == full["shard"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_run(self, shard)

    monkeypatch.setattr(run_module, "write_json_atomic", write)
    monkeypatch.setattr(ShardWorker, "run", run)
    out = tmp_path / "stopped"
    with pytest.raises(OSError) as raised:
        run_batch(SPEC(batch_work), src, out, get_engine("local"), shard_size=1000)
    assert raised.value.errno == errno.ENOSPC
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["shards"]) == ["00000"] and not manifest.get("complete")
    assert (out / "part-00000.jsonl").read_bytes() == (ref / "part-00000.jsonl").read_bytes()

    full.update(manifest_writes=0, shard="none")  # refused once, then the disk has room
    res = run_batch(SPEC(batch_work), src, tmp_path / "passed", get_engine("local"),
                    shard_size=1000)
    assert res.manifest["complete"] and res.shards_run == 3
    assert shard_rows(tmp_path / "passed") == shard_rows(ref)
    on_disk = json.loads((tmp_path / "passed" / "manifest.json").read_text())
    assert sorted(on_disk["shards"]) == ["00000", "00001", "00002"]


def test_worker_error_takes_the_shards_error_out_of_rays_wrappers():
    """`worker_error`: a plain `OSError` or `TagalignError` is itself; inside a Ray
    wrapper (a class of Ray's, its ``cause`` the worker's exception) it is found there;
    a wrapper around something else (a worker that died) gives None."""
    from tagalign.batch.engines import EngineError, worker_error

    full = OSError(errno.ENOSPC, "No space left on device")
    assert worker_error(full) is full
    error = EngineError("cannot start Ray")
    assert worker_error(error) is error

    class RayTaskError(Exception):  # as Ray's: the worker's exception kept as ``cause``
        def __init__(self, cause):
            super().__init__(f"ray::MapWorker() {cause!r}")
            self.cause = cause

    RayTaskError.__module__ = "ray.exceptions"
    assert worker_error(RayTaskError(full)) is full
    try:  # and further down a chain of raises
        try:
            raise RayTaskError(full)
        except RayTaskError as inner:
            raise RuntimeError("Ray Data's executor failed") from inner
    except RuntimeError as outer:
        assert worker_error(outer) is full
    assert worker_error(RayTaskError(RuntimeError("the actor died"))) is None
    assert worker_error(ValueError("x")) is None
