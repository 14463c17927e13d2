"""A resumable batch run: plan shards, skip the finished ones, run the rest, keep a manifest.

``OUT/manifest.json`` holds the task spec, a fingerprint of the project or encoder, the
input files (size, mtime) and their shards, and per finished shard its records in/out,
errors and output file sizes. It is rewritten atomically after every shard, so a run
killed at any point resumes: a shard counts as done only when the manifest lists it and
its files exist with the recorded sizes; anything else is redone from scratch (outputs
are written atomically, so there is never half a shard to keep).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagalign.batch.engines import Engine
from tagalign.batch.inputs import Shard, input_files, plan_shards
from tagalign.batch.tasks import errors_name
from tagalign.errors import ConflictError, TagalignError, is_no_space
from tagalign.io import read_json, versions, write_json_atomic

MANIFEST = "manifest.json"
LOCK = ".lock"
FORMAT = "tagalign-batch"
#: Spec keys that change the output; a rerun with other values must not mix results.
OUTPUT_KEYS = ("task", "target", "project", "limit", "threshold", "format", "kind", "source")
#: Share of a shard's records that may fail (their reasons in its errors file) before the
#: shard counts as failed: not marked done (a rerun redoes it) and the run fails. A model
#: that cannot process anything must not leave a "complete" folder of empty shards.
DEFAULT_MAX_ERRORS = 0.05


class BatchError(ConflictError, ValueError):
    """The output folder holds another run, or the input changed since it started."""


class ShardsFailedError(TagalignError):
    """Shards of a run had more failed records than allowed: the run is not complete."""


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def fingerprint(target: str) -> str:
    """Names what produced the output: a project's trained model, or an encoder spec/folder."""
    path = Path(target)
    h = hashlib.sha256()
    if (path / "project.json").exists():
        cfg = read_json(path / "project.json")
        h.update(repr((cfg.get("recipe"), cfg.get("params"), cfg.get("trained_at"),
                       cfg.get("vocabulary"))).encode())
        meta = path / "model" / "recipe.json"
        if meta.exists():
            h.update(meta.read_bytes())
    elif path.exists():
        for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if p.is_file():
                st = p.stat()
                h.update(f"{p.relative_to(path.parent)}\x1f{st.st_size}\x1f{st.st_mtime_ns}".encode())
    else:
        h.update(target.encode())
    return h.hexdigest()[:16]


def _difference(old: dict[str, Any], key: dict[str, Any], fp: str) -> str:
    """Names what differs from the run that wrote the folder (the refusal says which)."""
    was = old["spec"]
    keys = sorted(k for k in set(was) | set(key) if was.get(k) != key.get(k))
    if keys:
        return "other settings: " + ", ".join(
            f"{k} was {was.get(k)!r}, now {key.get(k)!r}" for k in keys)
    return (f"another version of {key.get('project') or key.get('target')} (trained or "
            "changed since)")


def _files_state(src: Path, source: str | None) -> list[dict[str, Any]]:
    """Size and modification time of every input file; for a folder read as one JSON-LD
    tree, of every file under it (shards are ranges counted from the tree's start, so a
    file added in a subfolder would shift the shards still to run)."""
    out = []
    for p in input_files(src, source):
        parts = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in parts:
            st = f.stat()
            out.append({"path": str(f), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def _remove_leftovers(out: Path) -> None:
    """The temporary files of writes that never finished (a worker killed mid-shard): a
    shard's files are renamed into place only when complete, so these are never output.
    Called while no worker writes: before a run's shards start and after they all ended."""
    for tmp in out.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """One run at a time on an output folder (an advisory lock on ``OUT/.lock``, released
    by the kernel when the process ends, however it ends)."""
    fh = open(out / LOCK, "a+")  # noqa: SIM115 - held for the whole run
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BatchError(f"another run is writing to {out}; wait for it to end or use "
                             "another --output") from None
        yield
    finally:
        fh.close()


@dataclass
class BatchResult:
    out: Path
    shards_total: int
    shards_skipped: int
    shards_run: int
    records_in: int
    records_out: int
    errors: int
    seconds: float
    startup_s: float
    workers: int
    manifest: dict[str, Any] = field(repr=False, default_factory=dict)
    #: shards of this run with more failed records than ``max_errors`` allows, by id
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check(self, max_errors: float) -> None:
        """`ShardsFailedError` when shards failed (`failed`), naming the first reason."""
        if self.failed:
            raise ShardsFailedError(
                f"{len(self.failed)} of {self.shards_total} shards failed (more than "
                f"{max_errors:.0%} of their records, see {self.out}/errors-*.jsonl, e.g. "
                f"{self.first_reason()}); they are not marked done: fix the cause and run the "
                "same command again")

    def first_reason(self) -> str:
        """Why the first record of the first failed shard failed (its errors file)."""
        path = self.out / errors_name(next(iter(self.failed)))
        try:
            with open(path, encoding="utf-8") as fh:
                return json.loads(fh.readline())["reason"]
        except (OSError, ValueError, KeyError):
            return "no reason recorded"


def shard_done(out: Path, entry: dict[str, Any] | None) -> bool:
    if not entry or not entry.get("files"):
        return False
    for name, size in entry["files"].items():
        p = out / name
        if not p.exists() or p.stat().st_size != size:
            return False
    return True


def shard_failed(summary: dict[str, Any], max_errors: float) -> bool:
    """More than the share ``max_errors`` of the shard's records failed (any, if all did)."""
    n, errors = summary["records_in"], summary["errors"]
    return errors > 0 and (errors >= n or errors > max_errors * n)


def run_batch(spec: dict[str, Any], src: Path, out: Path, engine: Engine, *,
              shard_size: int | None = None, overwrite: bool = False,
              max_errors: float = DEFAULT_MAX_ERRORS,
              on_plan: Callable[[int, int], None] | None = None,
              on_shard: Callable[[dict[str, Any]], None] | None = None) -> BatchResult:
    """Run ``spec`` (see `tagalign.batch.tasks`) over ``src`` into the folder ``out``.

    ``on_plan(records_total, records_already_done)`` is called once before work starts and
    ``on_shard(summary)`` after each shard, for progress displays. A shard in which more
    than the share ``max_errors`` of records failed is kept out of the finished ones
    (`BatchResult.failed`, ``manifest["failed"]``), so the run is not complete.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BatchError(f"--output {out} is a file; batch output is a folder")
    out.mkdir(parents=True, exist_ok=True)
    with _locked(out):
        return _run(spec, Path(src), out, engine, shard_size=shard_size, overwrite=overwrite,
                    max_errors=max_errors, on_plan=on_plan, on_shard=on_shard)


def _run(spec: dict[str, Any], src: Path, out: Path, engine: Engine, *,
         shard_size: int | None, overwrite: bool, max_errors: float,
         on_plan: Callable[[int, int], None] | None,
         on_shard: Callable[[dict[str, Any]], None] | None) -> BatchResult:
    """`run_batch` with the output folder locked."""
    target = spec.get("project") or spec.get("target")
    key = {k: spec[k] for k in OUTPUT_KEYS if k in spec}
    fp = fingerprint(str(target))
    files = _files_state(src, spec.get("source"))
    old = read_json(out / MANIFEST) if (out / MANIFEST).exists() else None
    if old is not None and not overwrite:
        if old.get("format") != FORMAT:
            raise BatchError(f"{out} holds something other than a tagalign batch output")
        if old["spec"] != key or old["fingerprint"] != fp:
            raise BatchError(f"{out} holds output of {_difference(old, key, fp)}; "
                             f"use a new --output or delete {out}")
        if old["input"]["source"] != str(src) or old["input"]["files"] != files:
            raise BatchError(f"the input changed since {out} was started (files or sizes "
                             "differ); use a new --output or delete it")
        shards = [Shard.from_json(s) for s in old["input"]["shards"]]
        done = dict(old["shards"])
        manifest = old
    else:
        shards = plan_shards(src, shard_size, spec.get("source"), engine.planned_workers())
        done = {}
        manifest = {"format": FORMAT, "spec": key, "fingerprint": fp,
                    "input": {"source": str(src), "files": files,
                              "shard_size": shard_size or "auto",
                              "shards": [s.to_json() for s in shards]},
                    "shards": {}, "versions": versions(), "started": _now(), "runs": []}
    _remove_leftovers(out)
    done = {sid: e for sid, e in done.items() if shard_done(out, e)}
    todo = [s for s in shards if s.id not in done]
    for s in todo:  # an errors file of an earlier attempt must not outlive it
        (out / errors_name(s.id)).unlink(missing_ok=True)
    manifest["shards"] = done
    manifest["failed"] = {}
    manifest["max_errored_blocks"] = 0
    run_info = {"engine": engine.name, "started": _now(), "shards": len(todo)}
    manifest["runs"].append(run_info)
    write_json_atomic(out / MANIFEST, manifest)
    if on_plan:
        on_plan(sum(s.size for s in shards), sum(e["records_in"] for e in done.values()))

    t0 = time.perf_counter()
    # A manifest write the full disk refused (a worker's next shard filling it meanwhile):
    # the shard stays recorded in memory and the write is tried again after the next
    # shard, or once the run stops with that shard's error (its temporary file gone by
    # then), so a shard that finished before the disk filled is kept.
    refused = False

    def record() -> None:
        nonlocal refused
        try:
            write_json_atomic(out / MANIFEST, manifest)
        except OSError as exc:
            if not is_no_space(exc):
                raise
            refused = True
        else:
            refused = False

    def finished(summary: dict[str, Any]) -> None:
        summary["finished"] = _now()
        failed = shard_failed(summary, max_errors)
        manifest["failed" if failed else "shards"][summary["shard"]] = summary
        manifest["updated"] = summary["finished"]
        record()
        if on_shard:
            on_shard(summary)

    if todo:  # nothing left: no engine start (Ray takes seconds)
        try:
            engine.run(todo, spec, str(out), finished)
        except BaseException:
            if refused:  # the run's own error is raised, whether this write lands or not
                with contextlib.suppress(OSError):
                    record()
            raise
        _remove_leftovers(out)  # of a worker killed mid-shard whose shard was redone
    seconds = time.perf_counter() - t0
    entries = [*manifest["shards"].values(), *manifest["failed"].values()]
    run_info.update(seconds=round(seconds, 3), startup_s=round(engine.startup_s, 3),
                    workers=engine.workers)
    manifest["totals"] = {k: sum(e[k] for e in entries)
                          for k in ("records_in", "records_out", "errors")}
    manifest["complete"] = len(manifest["shards"]) == len(shards)
    write_json_atomic(out / MANIFEST, manifest)
    return BatchResult(out, len(shards), len(shards) - len(todo), len(todo),
                       manifest["totals"]["records_in"], manifest["totals"]["records_out"],
                       manifest["totals"]["errors"], seconds, engine.startup_s, engine.workers,
                       manifest, dict(manifest["failed"]))
