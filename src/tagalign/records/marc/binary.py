"""Binary MARC 21 (ISO 2709) read as a stream, one record at a time.

The stream is cut at record terminators and each record's leader and directory are checked
by `tagalign.io.iso2709` (a damaged record costs that record only); this module decodes
what passes: UTF-8 records by hand (`fast_record`), MARC-8 ones through pymarc.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Generic, TypeVar

from pymarc import Record as MarcRecord
from pymarc.exceptions import PymarcException

from tagalign.io import Reporter
from tagalign.io.iso2709 import BLOCK, directory, fields, read_iso2709
from tagalign.records.marc.fields import MAPPED_TAGS, record_from_fields, record_from_marc
from tagalign.records.record import Record

T = TypeVar("T")
__all__ = ["BLOCK", "MarcItem", "fast_record", "pymarc_record", "read_binary"]


@dataclass(slots=True)
class MarcItem(Generic[T]):
    """One record of a MARC file: its number in the file (from 1, bad ones counted too),
    where it is (for a report: ``path: record N (byte B)``, or ``path:LINE: record N`` in
    MARC-XML) and the record (a pymarc record, or what the reader's ``decode`` made of it)."""

    n: int
    where: str
    record: T


def _utf8(chunk: bytes) -> bool:
    """Whether a record is UTF-8: its leader says so (leader/09 ``a``), or it says MARC-8
    but its bytes are UTF-8 (non-ASCII bytes of MARC-8 text never form UTF-8 sequences:
    its diacritics, 0xE0-0xFE, come before an ASCII letter), as some exports write."""
    if chunk[9:10] == b"a" or chunk.isascii():
        return True
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def pymarc_record(chunk: bytes) -> MarcRecord:
    """One ISO 2709 record (with its terminator) as a pymarc record; raises ValueError for
    a damaged leader or directory (`tagalign.io.iso2709.directory`) or undecodable data."""
    directory(chunk)  # pymarc reads a field past its end or into the next one
    utf8 = _utf8(chunk)
    try:
        # strict UTF-8: a record with a bad byte is reported, as a bad line of JSONL is
        return MarcRecord(chunk, to_unicode=True, force_utf8=utf8, hide_utf8_warnings=True,
                          utf8_handling="strict")
    except UnicodeDecodeError:
        raise ValueError(f"a field is not valid {'UTF-8' if utf8 else 'MARC-8'}, the "
                         f"character set its leader names (leader/09 {chr(chunk[9])!r})"
                         ) from None
    except PymarcException as exc:
        raise ValueError(str(exc) or type(exc).__name__) from exc


def fast_record(chunk: bytes) -> Record:
    """One ISO 2709 record as a tagalign `Record`, decoding only the fields the mapping reads.

    Why by hand: pymarc builds an object for every field and subfield of the record
    (~40 µs a record), which alone would cap reading at about 25,000 records/s on one
    core; a dump has millions. UTF-8 records take this path; MARC-8 ones go through
    pymarc, which knows that character set.
    """
    if not _utf8(chunk):
        return record_from_marc(pymarc_record(chunk))
    mapped = list(fields(chunk, MAPPED_TAGS))  # checks the leader before it is read
    return record_from_fields(chunk[:24].decode("ascii"), mapped)


def read_binary(fh: IO[bytes], path: Path, report: Reporter,
                decode: Callable[[bytes], T]) -> Iterator[MarcItem[T]]:
    """Yield each record of ``fh`` that ``decode`` takes (`pymarc_record`, `fast_record`);
    every other piece goes to ``report``, named by its number and byte offset."""
    for n, where, record in read_iso2709(fh, path, report, decode):
        yield MarcItem(n, where, record)
