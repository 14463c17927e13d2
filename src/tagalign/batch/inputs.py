"""Batch inputs cut into shards: a JSONL(.gz) or MARC file (binary or MARC-XML), a folder
of them, or Parquet.

A `Shard` is a range of *items* of one input file, where an item is a record or a piece of
bad input the loader reported (``path:line: why``). Counting bad items too keeps the shard
boundaries the same however the records parse, and puts every bad line into the errors
file of the shard it falls in, so nothing is silently dropped.

Record files go through `tagalign.records.read_records` (every format it knows, its
checks and reports); a shard reader streams its file from the top and skips the items
before its range, which costs a parse per skipped record (~20 µs for JSONL, ~50 µs for
binary MARC): give a very large input as a folder of files to keep that small. Parquet
files (columns as in our JSONL: ``id``, ``title``, ``abstract``, ``lang``, …) are read row
group by row group with pyarrow.
A vocabulary (any format `load_vocabulary` reads, or a project folder) is a source too,
for `tagalign encode`: each subject becomes a record whose title is its label.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from tagalign.errors import InputError, MissingFileError
from tagalign.records import InputReport, Record, read_records
from tagalign.records.loaders import MARC_SUFFIXES, guess_format, record_from_json
from tagalign.registry import Registry
from tagalign.vocab import Vocabulary, load_vocabulary

INPUTS: Registry[type[Input]] = Registry("input")
RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz",
                   *(s + gz for s in MARC_SUFFIXES for gz in ("", ".gz")))
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True, slots=True)
class Shard:
    """Items ``[start, stop)`` of ``path`` (rows of row groups ``[start, stop)`` for Parquet)."""

    id: str
    source: str
    path: str
    start: int
    stop: int
    size: int  # items (records and bad input) in the shard

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> Shard:
        return cls(**obj)


@dataclass(slots=True)
class BadItem:
    """Input the loader could not turn into a record."""

    where: str
    reason: str


class _CollectingReport(InputReport):
    """An `InputReport` that queues bad items (in input order) instead of logging them."""

    def __init__(self) -> None:
        super().__init__(strict=False)
        self.pending: list[BadItem] = []

    def bad(self, where: str, why: str) -> None:
        self.pending.append(BadItem(where, why))


register_input = INPUTS.register


class Input(ABC):
    """One input file's items, countable and readable by range.

    ``arg`` is the part of a source name after ``:`` (the label language of
    ``vocabulary:de``); sources that take none ignore it.
    """

    name: ClassVar[str]

    def __init__(self, arg: str = ""):
        self.arg = arg

    @abstractmethod
    def count(self, path: Path) -> list[int]:
        """Sizes of the file's natural units (1 per item; rows per row group for Parquet)."""

    @abstractmethod
    def read(self, shard: Shard) -> Iterator[Record | BadItem]:
        ...


@register_input
class RecordFileInput(Input):
    """Any record format `read_records` knows (JSONL(.gz), Annif TSV, a JSON-LD folder,
    MARC)."""

    name = "records"

    def _items(self, path: Path) -> Iterator[Record | BadItem]:
        report = _CollectingReport()
        for rec in read_records(path, report=report):
            yield from report.pending
            report.pending.clear()
            yield rec
        yield from report.pending

    def count(self, path: Path) -> list[int]:
        n = sum(1 for _ in self._items(path))
        return [n]

    def read(self, shard: Shard) -> Iterator[Record | BadItem]:
        for i, item in enumerate(self._items(Path(shard.path))):
            if i >= shard.stop:
                return
            if i >= shard.start:
                yield item


@register_input
class ParquetInput(Input):
    """Parquet with our JSONL's columns; a shard is a range of row groups."""

    name = "parquet"

    @staticmethod
    def _file(path: Path):
        import pyarrow.parquet as pq  # a dependency of tagalign (lazy: a second to import)

        return pq.ParquetFile(path)

    def count(self, path: Path) -> list[int]:
        meta = self._file(path).metadata
        return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]

    def read(self, shard: Shard) -> Iterator[Record | BadItem]:
        pf = self._file(Path(shard.path))
        row0 = sum(pf.metadata.row_group(i).num_rows for i in range(shard.start))
        for g in range(shard.start, shard.stop):
            for obj in pf.read_row_group(g).to_pylist():
                row0 += 1
                try:
                    yield _record_from_row(obj)
                except (TypeError, ValueError) as exc:
                    yield BadItem(f"{shard.path}:row {row0}", str(exc))


@functools.lru_cache(maxsize=2)
def _vocabulary(path: str):
    p = Path(path)
    return Vocabulary.load(p) if p.is_dir() else load_vocabulary(p)


@register_input
class VocabularyInput(Input):
    """Subjects of a vocabulary as records (id = subject id, title = label in ``arg``)."""

    name = "vocabulary"

    def count(self, path: Path) -> list[int]:
        return [len(_vocabulary(str(path)))]

    def read(self, shard: Shard) -> Iterator[Record | BadItem]:
        subjects = _vocabulary(shard.path).subjects[shard.start:shard.stop]
        for s in subjects:
            yield Record(id=s.id, title=s.label(self.arg or "de"), language=self.arg or "de")


def _record_from_row(obj: dict) -> Record:
    """A Parquet row: the fields of a JSONL record, ``subjects`` maybe a JSON-encoded list."""
    if isinstance(obj.get("subjects"), str):
        obj = {**obj, "subjects": json.loads(obj["subjects"])}
    return record_from_json(obj)


def input_for(path: Path) -> Input:
    name = path.name.lower()
    if name.endswith(PARQUET_SUFFIXES):
        return INPUTS["parquet"]()
    return INPUTS["records"]()


def input_files(src: Path, source: str | None = None) -> list[Path]:
    """The files a batch input consists of: the file itself, or a folder's record/Parquet
    files (sorted); a folder without any is read as one JSON-LD tree. With ``source``
    (e.g. ``vocabulary:de``) the input is one item of that source."""
    src = Path(src)
    if not src.exists():
        raise MissingFileError(f"input not found: {src}", src)
    if source is not None:
        return [src]
    if src.is_file():
        if not src.name.lower().endswith(PARQUET_SUFFIXES):
            guess_format(src)  # a clear error for an unknown file type, before any work
        return [src]
    files = sorted(p for p in src.rglob("*") if p.is_file()
                   and p.name.lower().endswith(RECORD_SUFFIXES + PARQUET_SUFFIXES))
    return files or [src]


def get_input(name: str) -> Input:
    prefix, _, arg = name.partition(":")
    return INPUTS.lookup(prefix, shown=name)(arg)


#: Bounds of an automatic shard size: a shard is the unit of resuming and of progress, and
#: each costs a little bookkeeping; a worker loads the model once, whatever it gets.
MIN_AUTO_SHARD, MAX_AUTO_SHARD, SHARDS_PER_WORKER = 50, 5000, 4


def choose_shard_size(total: int, workers: int) -> int:
    """About `SHARDS_PER_WORKER` shards per worker (so 200 records keep 2 workers busy
    and a slow shard does not hold up the end), within the bounds above."""
    per = -(-max(total, 1) // (max(workers, 1) * SHARDS_PER_WORKER))
    return max(MIN_AUTO_SHARD, min(MAX_AUTO_SHARD, per))


def plan_shards(src: Path, shard_size: int | None, source: str | None = None,
                workers: int = 1) -> list[Shard]:
    """Cut the input into shards of about ``shard_size`` items (never across files);
    ``None``: `choose_shard_size` for the input's size and ``workers``."""
    if shard_size is not None and shard_size < 1:
        raise InputError("shard size must be at least 1")
    counted = []
    for path in input_files(src, source):
        reader = get_input(source) if source else input_for(path)
        counted.append((path, reader, reader.count(path)))
    if shard_size is None:
        shard_size = choose_shard_size(sum(_items(r, u) for _, r, u in counted), workers)
    shards: list[Shard] = []
    for path, reader, units in counted:
        name = source or reader.name
        if reader.name == "parquet":  # whole row groups, about shard_size rows per shard
            start, rows = 0, 0
            for g, n in enumerate(units):
                rows += n
                if rows >= shard_size or g == len(units) - 1:
                    shards.append(Shard(f"{len(shards):05d}", name, str(path),
                                        start, g + 1, rows))
                    start, rows = g + 1, 0
            continue
        total = units[0]
        for a in range(0, total, shard_size):
            b = min(total, a + shard_size)
            shards.append(Shard(f"{len(shards):05d}", name, str(path), a, b, b - a))
    return shards


def _items(reader: Input, units: list[int]) -> int:
    return sum(units) if reader.name == "parquet" else units[0]


def read_shard(shard: Shard) -> Iterator[Record | BadItem]:
    return get_input(shard.source).read(shard)
