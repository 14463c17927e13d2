"""Binary MARC 21 (ISO 2709) read as a stream, one record at a time.

pymarc's `MARCReader` trusts each leader's record length to find the next record, so one
bad length (or a record cut off mid-file) shifts every later read and the rest of the file
is lost. The record terminator (0x1D) cannot occur inside a record, so this reader cuts the
stream at terminators itself and hands each piece to pymarc: a record whose leader length
disagrees with its size, or that pymarc cannot decode, costs that record only. Positions
are counted in the uncompressed stream.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Generic, TypeVar

from pymarc import Record as MarcRecord
from pymarc.exceptions import PymarcException

from tagalign.io import PARSE_ERRORS, Reporter, describe_error
from tagalign.records.marc.fields import (
    MAPPED_TAGS,
    MarcField,
    record_from_fields,
    record_from_marc,
)
from tagalign.records.record import Record

T = TypeVar("T")
LEADER, ENTRY = 24, 12

END_OF_RECORD = b"\x1d"
BLOCK = 1 << 20
#: a record is at most 99,999 bytes; this much without a terminator is not MARC, and is
#: skipped up to the next terminator instead of being held in memory
MAX_PIECE = 4 * BLOCK
#: bytes around records that exports add (line breaks, a DOS end-of-file mark): not a record
_FILLER = b"\r\n\t \x00\x1a"


@dataclass(slots=True)
class MarcItem(Generic[T]):
    """One record of a MARC file: its number in the file (from 1, bad ones counted too),
    where it is (for a report: ``path: record N (byte B)``, or ``path:LINE: record N`` in
    MARC-XML) and the record (a pymarc record, or what the reader's ``decode`` made of it)."""

    n: int
    where: str
    record: T


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


def pymarc_record(chunk: bytes) -> MarcRecord:
    """One ISO 2709 record (with its terminator) as a pymarc record; raises ValueError (or a
    pymarc error) for undecodable data."""
    # strict UTF-8: a record with a bad byte is reported, as a bad line of JSONL is
    return MarcRecord(chunk, to_unicode=True, utf8_handling="strict")


def fast_record(chunk: bytes) -> Record:
    """One ISO 2709 record as a tagalign `Record`, decoding only the fields the mapping reads.

    Why by hand: pymarc builds an object for every field and subfield of the record
    (~40 µs a record), which alone would cap reading at about 25,000 records/s on one
    core; a dump has millions. UTF-8 records (leader/09 ``a``) take this path; MARC-8 ones
    go through pymarc, which knows that character set.
    """
    if chunk[9:10] != b"a":
        return record_from_marc(pymarc_record(chunk))
    base = int(chunk[12:17])
    if not LEADER < base <= len(chunk):
        raise ValueError(f"base address of data {base} is outside the record")
    directory = chunk[LEADER:base - 1].decode("ascii")
    if len(directory) % ENTRY:
        raise ValueError("the directory is not a whole number of 12-byte entries")
    fields: list[MarcField] = []
    for i in range(0, len(directory), ENTRY):
        tag = directory[i:i + 3]
        if tag not in MAPPED_TAGS:
            continue
        start = base + int(directory[i + 7:i + 12])
        end = start + int(directory[i + 3:i + 7]) - 1  # without the field terminator
        if end >= len(chunk):
            raise ValueError(f"field {tag} runs past the end of the record")
        text = chunk[start:end].decode("utf-8")
        if tag < "010":
            fields.append((tag, " ", text, ()))
        else:
            ind, *subs = text.split("\x1f")
            fields.append((tag, ind[:1] or " ", None, [(s[:1], s[1:]) for s in subs if s]))
    return record_from_fields(chunk[:LEADER].decode("ascii"), fields)


def read_binary(fh: IO[bytes], path: Path, report: Reporter,
                decode: Callable[[bytes], T]) -> Iterator[MarcItem[T]]:
    """Yield each record of ``fh`` that ``decode`` takes (`pymarc_record`, `fast_record`);
    every other piece goes to ``report``, named by its number and byte offset."""
    buf = b""
    offset = 0  # of buf[0] in the stream
    n = good = 0
    truncated = None
    skipping = False  # inside a piece too long to be a record (reported when it began)
    while True:
        try:
            block = fh.read1(BLOCK)  # what came before a cut, not all or nothing
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
            try:
                check_length(chunk)
                rec = decode(chunk)
            except (PymarcException, *PARSE_ERRORS) as exc:
                report.bad(binary_where(path, n, at), describe_error(exc) or "undecodable")
                continue
            good += 1
            yield MarcItem(n, binary_where(path, n, at), rec)
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
