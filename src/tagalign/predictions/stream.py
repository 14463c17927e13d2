"""Predictions written as they are made (``OUT.partial``), kept on failure, resumable.

Any JSONL predictions file with an ``id`` per line: subjects (`tagalign suggest`), labels
(`tagalign classify predict`).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from tagalign.errors import ConflictError, NoSpaceError, is_no_space
from tagalign.io import InputReport, parse_lines
from tagalign.predictions.subjects import object_with_id, subjects_line
from tagalign.suggest import Quality, Suggestion


def partial_path(path: Path | str) -> Path:
    """Where `PredictionStream` writes until the run completes: ``OUT.partial``."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


class PartialExistsError(ConflictError, FileExistsError):
    """An interrupted run left ``OUT.partial``; continue it (resume) or delete it."""


#: how a run stopped by a full disk continues (`NoSpaceError`)
RESUME = "rerun the same command with --resume"


class PredictionStream:
    """Predictions written as they are made, so a failed or interrupted run loses nothing.

    Lines go to ``OUT.partial`` (gzip when OUT ends in ``.gz``; each `flush` makes what was
    written readable even if the process dies next); `commit` renames it to OUT. With
    ``resume=True`` the partial file of an earlier run (or a finished OUT) is kept: its
    complete lines are copied to a fresh partial file, their ids land in `done`, and new
    lines are appended after them. Without ``resume`` an existing partial file is refused
    (`PartialExistsError`), never overwritten.

    A full disk raises `NoSpaceError` naming ``OUT.partial``; what was flushed before stays
    in it (`kept` records), and the line a failed write cut off is dropped by the resumed
    run, which needs room for a copy of the partial file.
    """

    def __init__(self, path: Path | str, resume: bool = False):
        self.path = Path(path)
        self.partial = partial_path(self.path)
        self.resume = resume
        self.done: set[str] = set()
        self.written = 0
        #: records on disk in the partial file (this run's and the resumed ones) as of the
        #: last flush that succeeded
        self.kept = 0
        self._broken = False  # a write failed: nothing written after it is counted
        self._fh: IO[Any] | None = None  # text here, bytes in `MarcPredictionStream`
        self._raw: IO[bytes] | None = None

    def _file(self) -> IO[Any]:
        """The partial file, between `open` and `close` (ValueError outside, as a closed
        file's)."""
        if self._fh is None:
            raise ValueError(f"{self.partial}: the prediction stream is not open")
        return self._fh

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
        try:
            self._fh = self._open_text(tmp)
            if previous is not None:
                self._copy_complete_lines(previous)
        except BaseException as exc:  # the earlier run's file stays as it was
            self.close()
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._raise_if_full(exc)
            raise
        os.replace(tmp, self.partial)
        if previous == self.path:
            self.path.unlink()
        return self

    def _raise_if_full(self, exc: BaseException) -> None:
        """`NoSpaceError` naming the partial file, raised from ``exc`` of a full disk."""
        # after a failed write the file's buffer may have let bytes go: a later flush that
        # succeeds proves nothing, so `kept` stays as the last flush before it left it
        self._broken = True
        if is_no_space(exc):
            raise NoSpaceError.of(exc, self.partial, RESUME) from exc

    def _put(self, data: Any) -> None:
        """Write ``data`` (text, or bytes for MARC) to the partial file."""
        try:
            self._file().write(data)
        except OSError as exc:
            self._raise_if_full(exc)
            raise

    def _open_text(self, path: Path) -> IO[Any]:  # text here, bytes in the MARC stream
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
                self._put(line + "\n")
        self.flush()

    def write(self, rid: str, suggestions: Iterable[Suggestion],
              quality: Quality | None = None,
              domains: Sequence[tuple[str, float]] | None = None) -> None:
        """One record's subjects (`tagalign suggest`), with its quality estimate and its
        domains if any."""
        self.write_line(rid, subjects_line(rid, suggestions, quality, domains))

    def write_line(self, rid: str, line: str) -> None:
        """One record's prediction line, already serialised (labels, subjects)."""
        self._put(line)
        self.done.add(rid)
        self.written += 1

    def flush(self) -> None:
        """Make everything written so far durable in the partial file."""
        try:
            self._file().flush()  # for .gz a zlib sync point: readable up to here after a kill
        except OSError as exc:
            self._raise_if_full(exc)
            raise
        if not self._broken:
            self.kept = len(self.done)

    def close(self) -> None:
        """Close the partial file and leave it in place (the run did not complete). A
        write that fails now (a full disk) is let go: the partial file keeps what reached
        it, and a resumed run drops a line cut short."""
        if self._fh is not None:
            with contextlib.suppress(OSError, ValueError):  # ValueError: closed already
                self.flush()
            with contextlib.suppress(OSError, ValueError):
                self._fh.close()  # a GzipFile writes its trailer here
            self._fh = None
        if self._raw is not None:  # GzipFile leaves the file object it was given open
            with contextlib.suppress(OSError, ValueError):
                self._raw.close()
            self._raw = None

    def commit(self) -> Path:
        """The run completed: close and rename ``OUT.partial`` to OUT, only once every byte
        reached the file (a full disk raises `NoSpaceError` and leaves ``OUT.partial``)."""
        try:
            if self._raw is not None:  # gzip: the trailer is written when GzipFile closes
                self._file().close()
                self._fh = self._raw
            self._file().flush()
        except OSError as exc:
            self._raise_if_full(exc)
            raise
        self.close()
        os.replace(self.partial, self.path)
        return self.path
