"""Reading user input line by line.

Bad input is decoded per line, never per file: one undecodable byte or one broken line
costs that line only, and a compressed file cut short still yields what came before the
cut. Every loader (records, vocabularies, predictions, pairs) goes through `LineReader`.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Protocol, TypeVar

from tagalign.errors import InputError, file_error

T = TypeVar("T")

MAX_LINE_BYTES = 64 * 1024 * 1024
"""A longer line is skipped (and reported) without ever being held in memory whole."""

#: What a malformed line or file may raise from a parser; each is reported, never fatal.
PARSE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
    ArithmeticError)  # int(Infinity) from JSON raises OverflowError


class Reporter(Protocol):
    """What the readers need of `tagalign.io.report.InputReport` (``bad`` raises when
    strict)."""

    def bad(self, where: str, why: str) -> None: ...


def open_text(path: Path) -> io.TextIOBase:
    """Open a text file, transparently gunzipping ``*.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently gunzipping gzip data (told by its magic
    bytes, not the name: ``OUT.jsonl.gz.partial`` is gzip too). A file that cannot be
    opened raises the package's error naming it (`tagalign.errors.file_error`)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        # typeshed: a GzipFile is a BufferedIOBase, which it does not declare an IO[bytes]
        return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")  # type: ignore[return-value]
    except OSError as exc:
        raise file_error(path, exc) from exc


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


class LineError(InputError):
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
    report the first problem raises (`tagalign.io.report.BadInputError`).
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
