"""Predictions written as they are made (``OUT.partial``), kept on failure, resumable.

Any JSONL predictions file with an ``id`` per line: subjects (`tagalign suggest`), labels
(`tagalign classify predict`).
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any, TextIO

from tagalign.errors import ConflictError
from tagalign.io import InputReport, parse_lines
from tagalign.predictions.subjects import object_with_id, subjects_line
from tagalign.suggest import Quality, Suggestion


def partial_path(path: Path | str) -> Path:
    """Where `PredictionStream` writes until the run completes: ``OUT.partial``."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


class PartialExistsError(ConflictError, FileExistsError):
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
        self._fh: IO[Any] | None = None  # text here, bytes in `MarcPredictionStream`
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
        quiet = InputReport(stream=io.StringIO(), max_shown=0)

        def parse(line: str, lineno: int) -> tuple[str, str] | None:
            obj = object_with_id(line)
            return None if obj is None else (obj["id"], line)

        for rid, line in parse_lines(previous, quiet, parse, unit="predictions"):
            if rid not in self.done:
                self.done.add(rid)
                self._fh.write(line + "\n")
        self.flush()

    def write(self, rid: str, suggestions: Iterable[Suggestion],
              quality: Quality | None = None,
              domains: Sequence[tuple[str, float]] | None = None) -> None:
        """One record's subjects (`tagalign suggest`), with its quality estimate and its
        domains if any."""
        self.write_line(rid, subjects_line(rid, suggestions, quality, domains))

    def write_line(self, rid: str, line: str) -> None:
        """One record's prediction line, already serialised (labels, subjects)."""
        self._fh.write(line)
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
