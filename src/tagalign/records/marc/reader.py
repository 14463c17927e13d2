"""The ``marc`` record format: binary MARC 21 or MARC-XML, gzip or not, told by content.

Gzip by its magic bytes (`tagalign.io.open_binary`); then XML when the first byte that is
not white space or a byte-order mark is ``<``, else binary MARC (which starts with the
five digits of a record length). Both stream: a record is read, mapped and handed on
before the next is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pymarc import Record as MarcRecord
from pymarc.exceptions import PymarcException

from tagalign.io import PARSE_ERRORS, InputReport, describe_error, open_binary
from tagalign.records.loaders import register
from tagalign.records.marc.binary import MarcItem, fast_record, pymarc_record, read_binary
from tagalign.records.marc.fields import record_from_marc
from tagalign.records.marc.xml import XmlReader
from tagalign.records.record import Record


def sniff_marc(head: bytes) -> str | None:
    """``marcxml``, ``marc`` (binary) or None, from a file's first (uncompressed) bytes."""
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if head.startswith(b"<"):
        return "marcxml"
    if len(head) >= 24 and head[:5].isdigit() and head[12:17].isdigit():
        return "marc"
    return None


def _is_xml(fh) -> bool:
    try:
        head = fh.peek(64)[:64]
    except (EOFError, OSError):
        head = b""
    return sniff_marc(head) == "marcxml"


def iter_marc(path: Path | str, report: InputReport) -> Iterator[MarcItem[MarcRecord]]:
    """Every decodable pymarc record of a MARC file, in order; the rest goes to ``report``."""
    path = Path(path)
    with open_binary(path) as fh:
        if _is_xml(fh):
            yield from XmlReader(fh, path, report)
        else:
            yield from read_binary(fh, path, report, pymarc_record)


def iter_marc_records(path: Path | str, report: InputReport
                      ) -> Iterator[tuple[MarcItem[MarcRecord], Record]]:
    """Each pymarc record of a MARC file with its tagalign `Record`; a record that cannot be
    mapped (no control number) is reported by its position and skipped."""
    for item in iter_marc(path, report):
        try:
            rec = record_from_marc(item.record)
        except (PymarcException, *PARSE_ERRORS) as exc:
            report.bad(item.where, describe_error(exc))
            continue
        yield item, rec


@register("marc")
def read_marc(path: Path, report: InputReport) -> Iterator[Record]:
    """Binary MARC 21 (``.mrc``) or MARC-XML (``.xml``), gzip or not; the fields are mapped
    by `tagalign.records.marc.fields` (binary UTF-8 records by its fast decoder)."""
    path = Path(path)
    with open_binary(path) as fh:
        if not _is_xml(fh):
            for item in read_binary(fh, path, report, fast_record):
                yield item.record
            return
    for _, rec in iter_marc_records(path, report):
        yield rec
