"""ISO 2709, the framing of binary MARC 21, read as a stream one record at a time, its
leader and directory checked before any field is read.

pymarc's `MARCReader` trusts each leader's record length to find the next record, so one
bad length (or a record cut off mid-file) shifts every later read and the rest of the file
is lost. The record terminator (0x1D) cannot occur inside a record, so `read_iso2709` cuts
the stream at terminators itself and hands each piece to a decoder: a record whose leader
or directory is damaged costs that record only. Positions are counted in the uncompressed
stream. Both MARC readers use it: bibliographic records (`tagalign.records.marc`) and the
GND's authority records (`tagalign.vocab.gnd_marc`).

`directory` refuses what would make a decoder read the wrong bytes: a leader length that
is not the record's size, a base address outside the record, a directory that is not whole
12-byte entries of a tag and two numbers, a field that runs past the record, does not end
with a field terminator (0x1E) or holds one (it overlaps another field).
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import IO, TypeVar

from tagalign.io.lines import PARSE_ERRORS, Reporter, describe_error

T = TypeVar("T")
LEADER, ENTRY = 24, 12
END_OF_RECORD, END_OF_FIELD, SUBFIELD = b"\x1d", b"\x1e", "\x1f"
BLOCK = 1 << 20
#: a record is at most 99,999 bytes; this much without a terminator is not MARC, and is
#: skipped up to the next terminator instead of being held in memory
MAX_PIECE = 4 * BLOCK
#: bytes around records that exports add (line breaks, a DOS end-of-file mark): not a record
_FILLER = b"\r\n\t \x00\x1a"
_ENTRIES = re.compile(rb"(?:[0-9A-Za-z]{3}[0-9]{9})*")

#: one field as a record's mapping reads it: (tag, first indicator, control field data or
#: None, subfields as (code, value) pairs)
Field = tuple[str, str, "str | None", list[tuple[str, str]]]


def binary_where(path: Path, n: int, offset: int) -> str:
    return f"{path}: record {n} (byte {offset})"


def check_length(chunk: bytes) -> None:
    """Raise ValueError unless the leader's record length is the record's size."""
    head = chunk[:5]
    if not head.isdigit():
        raise ValueError(f"no record length in the leader (starts with {head!r})")
    if int(head) != len(chunk):
        raise ValueError(f"the leader gives a length of {int(head)} bytes, but the record "
                         f"has {len(chunk)} up to its end-of-record mark")


def directory(chunk: bytes, wanted: Collection[str] | None = None
              ) -> list[tuple[str, int, int]]:
    """(tag, start, stop) of each field of one record (with its terminator) whose tag is in
    ``wanted`` (all by default): its data is ``chunk[start:stop]``, its terminator at
    ``stop``. Raises ValueError naming the first fault (see the module docstring); the
    leader and the directory's form are checked whole, the fields' bounds those returned."""
    check_length(chunk)
    if not chunk[:LEADER].isascii():
        raise ValueError(f"the leader holds bytes that are not ASCII ({chunk[:LEADER]!r})")
    if len(chunk) <= LEADER:
        raise ValueError(f"the record has {len(chunk)} bytes, no more than its "
                         f"{LEADER}-byte leader")
    base_text = chunk[12:17]
    if not base_text.isdigit():
        raise ValueError(f"no base address of data in the leader (bytes 12-16 are "
                         f"{base_text!r})")
    base = int(base_text)
    if not LEADER < base < len(chunk) or chunk[base - 1:base] != END_OF_FIELD:
        raise ValueError(f"the leader's base address of data, {base}, is not right after a "
                         f"directory (the record has {len(chunk)} bytes)")
    entries = chunk[LEADER:base - 1]
    if len(entries) % ENTRY or not _ENTRIES.fullmatch(entries):
        raise ValueError("the directory is not whole 12-byte entries of a tag and two "
                         f"numbers ({len(entries)} bytes: {entries[:36]!r}…)")
    out = []
    end = len(chunk) - 1  # the record terminator
    text = entries.decode("ascii")  # the pattern let only ASCII through
    for i in range(0, len(text), ENTRY):
        tag = text[i:i + 3]
        if wanted is not None and tag not in wanted:
            continue
        length, offset = int(text[i + 3:i + 7]), int(text[i + 7:i + 12])
        start = base + offset
        stop = start + length - 1
        if length < 1 or stop >= end:
            raise ValueError(f"field {tag} (length {length} at offset {offset}) runs past "
                             "the end of the record")
        if chunk[stop] != 0x1E:
            raise ValueError(f"field {tag} (length {length} at offset {offset}) does not end "
                             "with a field terminator")
        if chunk.find(END_OF_FIELD, start, stop) >= 0:
            raise ValueError(f"field {tag} (length {length} at offset {offset}) overlaps "
                             "another field")
        out.append((tag, start, stop))
    return out


def fields(chunk: bytes, wanted: Collection[str] | None = None, errors: str = "strict"
           ) -> Iterator[Field]:
    """The fields of one UTF-8 record (`directory`) as `Field`s; a byte that is not UTF-8
    raises ValueError naming the field, or (``errors="replace"``) becomes U+FFFD."""
    for tag, start, stop in directory(chunk, wanted):
        try:
            text = chunk[start:stop].decode("utf-8", errors)
        except UnicodeDecodeError as exc:
            raise ValueError(f"field {tag} is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x}"
                             f"), though the leader says so (leader/09 'a')") from None
        if tag < "010" and tag.isdigit():
            yield tag, " ", text, []
        else:
            ind, *subs = text.split(SUBFIELD)
            yield tag, ind[:1] or " ", None, [(s[:1], s[1:]) for s in subs if s]


def read_iso2709(fh: IO[bytes], path: Path, report: Reporter, decode: Callable[[bytes], T]
                 ) -> Iterator[tuple[int, str, T]]:
    """(number from 1, where, ``decode(record)``) of each record of ``fh`` that ``decode``
    takes; every other piece goes to ``report``, named by its number and byte offset
    (``path: record N (byte B)``). ``decode`` gets the record with its terminator and
    raises one of `PARSE_ERRORS` for one it cannot read."""
    buf = b""
    offset = 0  # of buf[0] in the stream
    n = good = 0
    truncated = None
    skipping = False  # inside a piece too long to be a record (reported when it began)
    read = getattr(fh, "read1", fh.read)  # read1: what came before a cut, not all or nothing
    while True:
        try:
            block = read(BLOCK)
        except EOFError:
            truncated = "compressed data ends early"
            break
        except (gzip.BadGzipFile, zlib.error) as exc:
            truncated = f"compressed data is corrupt ({exc})"
            break
        if not block:
            break
        buf += block
        start = 0
        while (end := buf.find(END_OF_RECORD, start)) >= 0:
            chunk = buf[start:end + 1].lstrip(_FILLER)
            at = offset + end + 1 - len(chunk)
            start = end + 1
            if skipping or len(chunk) == 1:  # the end of a skipped piece; a stray terminator
                skipping = False
                continue
            n += 1
            where = binary_where(path, n, at)
            try:
                value = decode(chunk)
            except PARSE_ERRORS as exc:
                report.bad(where, describe_error(exc) or "undecodable")
                continue
            good += 1
            yield n, where, value
        buf = buf[start:]
        offset += start
        if len(buf) > MAX_PIECE and not skipping:
            n += 1
            report.bad(binary_where(path, n, offset), f"no end-of-record mark within "
                       f"{MAX_PIECE} bytes: not MARC, skipped up to the next mark")
            skipping = True
        if skipping:
            offset += len(buf)
            buf = b""
    if truncated is not None:
        report.bad(str(path), f"{truncated} after {good} records")
    elif not skipping and (rest := buf.lstrip(_FILLER)):
        at = offset + len(buf) - len(rest)
        report.bad(binary_where(path, n + 1, at),
                   f"cut off: the file ends {len(rest)} bytes into the record, before its "
                   "end-of-record mark")
