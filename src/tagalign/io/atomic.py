"""Atomic, pickle-free persistence helpers shared by every artifact a user trains."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, TextIO, TypeVar

import numpy as np

T = TypeVar("T")


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[str]:
    """A temporary sibling file name to write to; the file replaces ``path`` in one rename
    once the block succeeds, and is removed when it fails. Readers see the old or the new
    content, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old or the new content, never half of it."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """A text file handle whose content replaces ``path`` only once the block succeeds
    (gzip-compressed when the name ends in ``.gz``)."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    with atomic_path(path) as tmp, opener(tmp, "wt", encoding="utf-8") as fh:
        yield fh


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2).encode("utf-8"))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(array), allow_pickle=False)


def load_npy(path: Path, mmap: bool = False) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def save_csr_atomic(folder: Path, prefix: str, matrix: Any, *, values: bool = True) -> None:
    """A scipy CSR matrix as ``{prefix}-indptr.npy`` (int64), ``-indices.npy`` (int32) and,
    with ``values``, ``-data.npy`` (float32), each written atomically and without pickle;
    the shape is the caller's to keep (beside its other metadata)."""
    save_npy_atomic(folder / f"{prefix}-indptr.npy", matrix.indptr.astype(np.int64))
    save_npy_atomic(folder / f"{prefix}-indices.npy", matrix.indices.astype(np.int32))
    if values:
        save_npy_atomic(folder / f"{prefix}-data.npy", matrix.data.astype(np.float32))


def load_csr(folder: Path, prefix: str, shape: tuple[int, int], *, values: bool = True,
             mmap: bool = False) -> Any:
    """The matrix `save_csr_atomic` wrote; without ``values`` every stored entry is 1.0.

    ``mmap``: indices and values stay mapped from their files (scipy keeps them as views);
    the row pointers are small and converted to the indices' dtype in memory."""
    import scipy.sparse as sp  # here: importing tagalign.io stays free of scipy

    indices = load_npy(folder / f"{prefix}-indices.npy", mmap)
    data = load_npy(folder / f"{prefix}-data.npy", mmap) if values else \
        np.ones(len(indices), np.float32)
    return sp.csr_matrix((data, indices, load_npy(folder / f"{prefix}-indptr.npy", mmap)),
                         shape=shape)


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``path`` in one rename.

    A crash leaves the previous folder (or nothing) in place, never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def versions() -> dict[str, str]:
    """Versions of the packages whose behaviour an artifact depends on."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for pkg in ("tagalign", "numpy", "torch", "sentence-transformers", "scikit-learn",
                "faiss-cpu", "omikuji", "lightgbm"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out


# -- reading user input line by line -------------------------------------------------------
# Bad input is decoded per line, never per file: one undecodable byte or one broken line
# costs that line only, and a compressed file cut short still yields what came before the
# cut. Every loader (records, vocabularies, predictions, pairs) goes through `LineReader`.

MAX_LINE_BYTES = 64 * 1024 * 1024
"""A longer line is skipped (and reported) without ever being held in memory whole."""

#: What a malformed line or file may raise from a parser; each is reported, never fatal.
PARSE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
    ArithmeticError)  # int(Infinity) from JSON raises OverflowError


class Reporter(Protocol):
    """What the readers need of `tagalign.records.InputReport` (``bad`` raises when strict)."""

    def bad(self, where: str, why: str) -> None: ...


#: The saved folders of tagalign and the command that reads each (see `model_kind`).
MODEL_KINDS = {
    "project": "a subject-tagging project, read by `tagalign suggest`",
    "recipe": "the model folder of a subject-tagging project (give `tagalign suggest` "
              "the project folder above it)",
    "classifier": "a classifier, read by `tagalign classify predict`",
    "pairs": "a pairs model, read by `tagalign pairs predict`",
}


def model_kind(folder: Path) -> str | None:
    """Which of `MODEL_KINDS` the folder holds (from its small JSON files only, so a
    command given the wrong folder says so before loading a model), None if none."""
    folder = Path(folder)
    if (folder / "project.json").is_file():
        return "project"
    if (folder / "recipe.json").is_file():
        return "recipe"
    if not (folder / "config.json").is_file():
        return None
    try:
        config = read_json(folder / "config.json")
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if "markers" in config or (folder / "thresholds.json").is_file():
        return "pairs"
    if "labels" in config and "thresholds" in config:
        return "classifier"
    return None


def wrong_model_message(folder: Path, want: str) -> str | None:
    """The refusal for a folder holding another kind of model than ``want`` (None: it
    holds ``want``, or nothing we know, which the loader then reports)."""
    kind = model_kind(folder)
    if kind is None or kind == want:
        return None
    return f"{folder} holds {MODEL_KINDS[kind]}, not {MODEL_KINDS[want].split(',')[0]}"


def open_text(path: Path) -> io.TextIOBase:
    """Open a text file, transparently gunzipping ``*.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently gunzipping gzip data (told by its magic
    bytes, not the name: ``OUT.jsonl.gz.partial`` is gzip too)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _utf8_error(exc: UnicodeDecodeError, line_start: int = 0) -> str:
    bad = exc.object[exc.start:exc.start + 1].hex()
    return f"not valid UTF-8 (byte 0x{bad} at column {exc.start - line_start + 1})"


class LineReader:
    """Decode a text file line by line; what cannot be decoded is reported, not raised.

    Iterating yields ``(line number, text without the line break)`` for every line that
    is valid UTF-8 (a leading BOM is dropped). A line that is not valid UTF-8, or longer
    than `MAX_LINE_BYTES`, goes to ``report`` as ``path:line: reason`` and is skipped. A
    compressed file that ends early (or is corrupt) stops the iteration quietly and sets
    `truncated`; call `finish` with the number of items the caller got so that the report
    says ``path: compressed data ends early after N records``. Most callers want
    `parse_lines`, which does all of this around a per-line parser.
    """

    def __init__(self, path: Path | str, report: Reporter, *, max_line_bytes: int = MAX_LINE_BYTES):
        self.path = Path(path)
        self.report = report
        self.max_line_bytes = max_line_bytes
        self.truncated: str | None = None  # why the compressed stream stopped early
        self.lines = 0  # lines seen (decoded or not)

    def bad(self, lineno: int, why: str) -> None:
        """Report line ``lineno`` of this file as malformed (raises when the report is strict)."""
        self.report.bad(f"{self.path}:{lineno}", why)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        with open_binary(self.path) as fh:
            lineno = 0
            while True:
                try:
                    raw = fh.readline(self.max_line_bytes + 1)
                except EOFError:
                    self.truncated = "compressed data ends early"
                    return
                except (gzip.BadGzipFile, zlib.error) as exc:
                    self.truncated = f"compressed data is corrupt ({exc})"
                    return
                if not raw:
                    return
                lineno += 1
                self.lines = lineno
                if len(raw) > self.max_line_bytes and not raw.endswith(b"\n"):
                    self.bad(lineno, f"line longer than {self.max_line_bytes} bytes")
                    if not self._skip_rest(fh):
                        return
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self.bad(lineno, _utf8_error(exc))
                    continue
                # a BOM is dropped wherever it is: files are often concatenated exports
                yield lineno, text.removeprefix("\ufeff").rstrip("\r\n")

    def _skip_rest(self, fh: IO[bytes]) -> bool:
        """Read past the rest of an over-long line; False when the file ended (or broke)."""
        try:
            while chunk := fh.readline(1 << 20):
                if chunk.endswith(b"\n"):
                    return True
        except EOFError:
            self.truncated = "compressed data ends early"
        except (gzip.BadGzipFile, zlib.error) as exc:
            self.truncated = f"compressed data is corrupt ({exc})"
        return False

    def finish(self, n_items: int, unit: str = "records") -> None:
        """Report a compressed file cut short, saying how many items came before the cut."""
        if self.truncated is not None:
            self.report.bad(str(self.path), f"{self.truncated} after {n_items} {unit}")


class LineError(ValueError):
    """A parse error that knows the line it happened on (``where`` = ``path:lineno``)."""

    def __init__(self, lineno: int, why: str):
        super().__init__(why)
        self.lineno = lineno


def decode_utf8(data: bytes) -> str:
    """Decode a whole-file document (one JSON-LD record); bad bytes raise `LineError`."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise LineError(data.count(b"\n", 0, line_start) + 1,
                        _utf8_error(exc, line_start)) from None


def parse_lines(path: Path | str, report: Reporter, parse: Callable[[str, int], T | None],
                *, unit: str = "records") -> Iterator[T]:
    """Yield ``parse(text, lineno)`` for each decodable line; ``None`` results are dropped.

    A line whose parser raises one of `PARSE_ERRORS` is reported as ``path:line: reason``
    and skipped, so the items before and after it still come out, in order. With a strict
    report the first problem raises (`tagalign.records.BadInputError`).
    """
    reader = LineReader(path, report)
    n = 0
    for lineno, text in reader:
        try:
            item = parse(text, lineno)
        except PARSE_ERRORS as exc:
            reader.bad(lineno, describe_error(exc))
            continue
        if item is not None:
            n += 1
            yield item
    reader.finish(n, unit)


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a parse error (the text a report shows after ``path:line:``)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    return str(exc) or type(exc).__name__


def read_text_lenient(path: Path | str, report: Reporter) -> tuple[str, LineReader]:
    """A whole-document file (GND JSON, SKOS) as text, decoded line by line.

    Undecodable lines are reported and left out (kept as empty lines, so line numbers in
    later parse errors still match the file); the returned reader's ``finish`` reports a
    compressed file cut short once the caller knows how many items it recovered.
    """
    reader = LineReader(path, report)
    lines: list[str] = []
    for lineno, text in reader:
        lines.extend([""] * (lineno - 1 - len(lines)))
        lines.append(text)
    return "\n".join(lines), reader


# -- bad input is reported, never silently dropped ------------------------------------
class BadInputError(ValueError):
    """Raised in strict mode at the first malformed line or file."""


@dataclass
class InputReport:
    """Counts and first examples of skipped input and of gold ids missing from a vocabulary.

    ``strict=True`` turns the first problem into a `BadInputError`.
    """

    strict: bool = False
    stream: TextIO | None = None
    max_shown: int = 10
    max_kept: int = 1000  # messages kept in `skipped`; `n_skipped` counts them all
    skipped: list[str] = field(default_factory=list)
    n_skipped: int = 0
    missing_subjects: Counter = field(default_factory=Counter)
    records_read: int = 0

    def bad(self, where: str, why: str) -> None:
        """Report one malformed item (``where`` = ``path:line`` or a path)."""
        message = f"{where}: {why}"
        if self.strict:
            raise BadInputError(message)
        self.n_skipped += 1
        if len(self.skipped) < self.max_kept:
            self.skipped.append(message)
        if self.n_skipped <= self.max_shown:
            print(f"warning: skipped {message}", file=self.stream or sys.stderr)

    def missing(self, subject_id: str) -> None:
        self.missing_subjects[subject_id] += 1

    def summary(self) -> str:
        parts = [f"{self.records_read} records read"]
        if self.n_skipped:
            parts.append(f"{self.n_skipped} malformed items skipped")
        if self.missing_subjects:
            n = sum(self.missing_subjects.values())
            parts.append(f"{n} gold subject ids ({len(self.missing_subjects)} distinct) "
                         "not in the vocabulary, dropped")
        return "; ".join(parts)

    def print_summary(self) -> None:
        """Print the end-of-run summary (only when something was skipped or dropped)."""
        if self.n_skipped or self.missing_subjects:
            print(self.summary(), file=self.stream or sys.stderr)
