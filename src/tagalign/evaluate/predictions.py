"""Prediction files: JSONL (``.gz`` allowed), one line per record, best subject first.

``{"id": "...", "subjects": [{"id": "4015065-3", "label": "Epos", "score": 0.83}, ...]}``;
a plain list of ids (``"subjects": ["4015065-3", ...]``) is accepted too. Subject ids are
normalised (``gnd:…`` and ``https://d-nb.info/gnd/…`` become the bare GND id). The order
of the list is the ranking; scores are kept for people, not re-sorted.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TextIO

from tagalign.io import atomic_text, parse_lines
from tagalign.records import InputReport
from tagalign.suggest import Suggestion
from tagalign.vocab import normalize_subject_id


def _ids(subjects: object) -> list[str]:
    if not isinstance(subjects, list):
        raise ValueError("'subjects' is not a list")
    out = []
    for s in subjects:
        if isinstance(s, str):
            out.append(normalize_subject_id(s))
        elif isinstance(s, dict) and isinstance(s.get("id"), str):
            out.append(normalize_subject_id(s["id"]))
        else:
            raise ValueError(f"bad subject entry {s!r}: expected an id or {{'id': ...}}")
    return out


def _object_with_id(line: str) -> dict | None:
    """One prediction line's JSON object (None for a blank line); raises without an id."""
    if not line.strip():
        return None
    obj = json.loads(line)
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise ValueError("expected an object with an 'id'")
    return obj


def _line(rid: str, suggestions: Iterable[Suggestion]) -> str:
    return json.dumps({"id": rid, "subjects": [s.to_json() for s in suggestions]},
                      ensure_ascii=False) + "\n"


def read_rows_by_id(path: Path | str, report: InputReport | None,
                    row: Callable[[dict], list[str]]) -> dict[str, list[str]]:
    """``{record id: row(object)}`` for a predictions JSONL, one object per line.

    Malformed lines (bad bytes, bad JSON, no ``id``, a row ``row`` rejects, a record id seen
    before) go to ``report`` as ``path:line``: skipped by default (the first of a repeated id
    wins), a `BadInputError` when the report is strict.
    """
    report = report if report is not None else InputReport()
    out: dict[str, list[str]] = {}

    def parse(line: str, lineno: int) -> str | None:
        obj = _object_with_id(line)
        if obj is None:
            return None
        if obj["id"] in out:
            raise ValueError(f"record id {obj['id']!r} predicted again")
        out[obj["id"]] = row(obj)
        return obj["id"]

    for _ in parse_lines(Path(path), report, parse, unit="predictions"):
        pass
    return out


def read_predictions(path: Path | str, report: InputReport | None = None
                     ) -> dict[str, list[str]]:
    """``{record id: [subject ids best first]}`` (see `read_rows_by_id` for bad lines)."""
    return read_rows_by_id(path, report, lambda obj: _ids(obj.get("subjects", [])))


def write_predictions(path: Path | str, rows: Iterable[tuple[str, list[Suggestion]]]) -> int:
    """Write predictions atomically (``.gz`` compresses); returns the number of records."""
    n = 0
    with atomic_text(Path(path)) as fh:
        for rid, suggestions in rows:
            fh.write(_line(rid, suggestions))
            n += 1
    return n


def partial_path(path: Path | str) -> Path:
    """Where `PredictionStream` writes until the run completes: ``OUT.partial``."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


class PartialExistsError(FileExistsError):
    """An interrupted run left ``OUT.partial``; continue it (resume) or delete it."""


class PredictionStream:
    """Predictions written as they are made, so a failed or interrupted run loses nothing.

    Lines go to ``OUT.partial`` (gzip when OUT ends in ``.gz``; each `flush` makes what was
    written readable even if the process dies next); `commit` renames it to OUT. With
    ``resume=True`` the partial file of an earlier run (or a finished OUT) is kept: its
    complete lines are copied to a fresh partial file, their ids land in `done`, and new
    lines are appended after them. Without ``resume`` an existing partial file is refused
    (`PartialExistsError`), never overwritten.
    """

    def __init__(self, path: Path | str, resume: bool = False):
        self.path = Path(path)
        self.partial = partial_path(self.path)
        self.resume = resume
        self.done: set[str] = set()
        self.written = 0
        self._fh: TextIO | None = None
        self._raw: IO[bytes] | None = None

    def open(self) -> PredictionStream:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        previous = None
        if self.resume:
            previous = self.partial if self.partial.exists() else (
                self.path if self.path.exists() else None)
        elif self.partial.exists():
            raise PartialExistsError(
                f"{self.partial} holds predictions of an interrupted run: add --resume to "
                f"continue it, or delete it to start over")
        tmp = self.partial.with_name(f".{self.partial.name}.{os.getpid()}.tmp")
        self._fh = self._open_text(tmp)
        if previous is not None:
            self._copy_complete_lines(previous)
        os.replace(tmp, self.partial)
        if previous == self.path:
            self.path.unlink()
        return self

    def _open_text(self, path: Path) -> TextIO:
        if self.path.suffix == ".gz":
            # no file name or time in the gzip header: the same predictions, the same bytes
            self._raw = open(path, "wb")  # noqa: SIM115 - closed in close()
            return io.TextIOWrapper(gzip.GzipFile(filename="", mode="wb", fileobj=self._raw,
                                                  mtime=0), encoding="utf-8")
        return open(path, "w", encoding="utf-8")

    def _copy_complete_lines(self, previous: Path) -> None:
        """Keep every whole prediction line of ``previous`` (a cut-off last line, or a gzip
        stream cut mid-way by a killed run, is dropped quietly: it gets predicted again)."""
        from tagalign.records import InputReport

        quiet = InputReport(stream=io.StringIO(), max_shown=0)

        def parse(line: str, lineno: int) -> tuple[str, str] | None:
            obj = _object_with_id(line)
            return None if obj is None else (obj["id"], line)

        for rid, line in parse_lines(previous, quiet, parse, unit="predictions"):
            if rid not in self.done:
                self.done.add(rid)
                self._fh.write(line + "\n")
        self.flush()

    def write(self, rid: str, suggestions: Iterable[Suggestion]) -> None:
        self._fh.write(_line(rid, suggestions))
        self.done.add(rid)
        self.written += 1

    def flush(self) -> None:
        """Make everything written so far durable in the partial file."""
        self._fh.flush()  # for .gz this is a zlib sync point: readable up to here after a kill

    def close(self) -> None:
        """Close the partial file and leave it in place (the run did not complete)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._raw is not None:  # GzipFile leaves the file object it was given open
            self._raw.close()
            self._raw = None

    def commit(self) -> Path:
        """The run completed: close and rename ``OUT.partial`` to OUT."""
        self.close()
        os.replace(self.partial, self.path)
        return self.path
