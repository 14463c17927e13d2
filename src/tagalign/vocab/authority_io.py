"""MARC 21 authority records read from either encoding the DNB ships, MARC-XML or binary ISO
2709, gzipped or not (told by the bytes): each record as its leader, its 001 and the fields
a caller asks for, as ``(code, value)`` subfields. The GND loader (`tagalign.vocab.gnd_marc`)
maps them to subjects; the change reader (`tagalign.vocab.changes.marc`) to changes.
"""

from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Collection, Iterator
from functools import partial
from pathlib import Path
from typing import IO, cast

from tagalign.io import Reporter, iso2709, open_binary
from tagalign.runtime import ProgressCallback

#: a record's fields the mapping reads: tag → occurrences → (code, value) subfields
Fields = dict[str, list[list[tuple[str, str]]]]


def _record_fields(record: ET.Element, wanted: frozenset[str]) -> tuple[str, str, Fields]:
    leader, control = "", ""
    fields: Fields = {}
    for child in record:
        name = child.tag.rpartition("}")[2]
        if name == "datafield":
            tag = child.get("tag", "")
            if tag in wanted:
                fields.setdefault(tag, []).append(
                    [(sf.get("code", ""), sf.text or "") for sf in child])
        elif name == "leader":
            leader = child.text or ""
        elif name == "controlfield" and child.get("tag") == "001":
            control = (child.text or "").strip()
    return leader, control, fields


def _is_record(tag: str) -> bool:
    return tag == "record" or tag.endswith("}record")


def _xml_records(fh: IO[bytes], wanted: frozenset[str]) -> Iterator[tuple[str, str, Fields]]:
    """(leader, 001, fields) of each ``record`` element, namespaced or not, in file order.

    Only start events are asked for (half the events of start and end): a record is
    complete when the next one starts or the document ends. Finished records are cleared
    from the root as the next one starts (the tree builder still fills the new one), so a
    dump of 200k records never sits in memory. Fed by hand in blocks (not `iterparse`) so
    that the records before a syntax error or a cut in the same block still come out; the
    error is raised after them.

    By hand over ElementTree rather than pymarc's reader: pymarc parses MARC-XML with a SAX
    handler that builds whole `pymarc.Record` objects through Python callbacks, about five
    times slower than reading the eight fields the mapping needs."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start",))
    root: ET.Element | None = None
    pending: ET.Element | None = None
    # tags seen that are not a record's (a field's, a subfield's): one set lookup per
    # element, the cost that counts at 30 elements a record and 1.5M records
    others: set[str] = set()
    read = getattr(fh, "read1", fh.read)  # what has been decompressed, before a cut
    while True:
        error: BaseException | None = None
        try:
            data = read(1 << 16)
            if data:
                parser.feed(data)
            else:
                parser.close()
        except (ET.ParseError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            error, data = exc, b""
        # "start" events only: always an element
        for _, elem in cast(Iterator[tuple[str, ET.Element]], parser.read_events()):
            tag = elem.tag
            if tag in others:
                continue
            if root is None:
                root = elem
                if _is_record(tag):  # a file holding one bare record
                    pending = elem
                continue
            if _is_record(tag):
                if pending is not None:
                    yield _record_fields(pending, wanted)
                pending = elem
                root.clear()  # drop the finished records (and the whitespace between)
            else:
                others.add(tag)
        if error is not None:
            raise error
        if not data:
            break
    if pending is not None:
        yield _record_fields(pending, wanted)


def _binary_fields(chunk: bytes, wanted: frozenset[str]) -> tuple[str, str, Fields]:
    """(leader, 001, fields) of one ISO 2709 record; ValueError for a damaged leader or
    directory (`tagalign.io.iso2709`). The DNB writes UTF-8: a stray byte becomes U+FFFD."""
    control = ""
    fields: Fields = {}
    for tag, _, data, subfields in iso2709.fields(chunk, wanted | {"001"}, errors="replace"):
        if data is not None:
            control = data.strip()
        else:
            fields.setdefault(tag, []).append(subfields)
    return chunk[:iso2709.LEADER].decode("ascii"), control, fields


def _binary_records(fh: IO[bytes], path: Path, report: Reporter, wanted: frozenset[str]
                    ) -> Iterator[tuple[str, str, Fields]]:
    """The same from ISO 2709: a damaged record is reported by its number and byte offset
    and costs that record only (the stream is cut at end-of-record marks)."""
    for _, _, record in iso2709.read_iso2709(fh, path, report,
                                          partial(_binary_fields, wanted=wanted)):
        yield record


def _is_xml(path: Path) -> bool:
    with open_binary(path) as fh:
        head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"<")


def authority_records(path: Path, report: Reporter, wanted: Collection[str],
                      progress: ProgressCallback | None = None
                      ) -> Iterator[tuple[int, str, str, Fields]]:
    """(number from 1, leader, 001, the ``wanted`` fields) of each record of a MARC 21 file,
    in file order. A damaged binary record, and a file cut short or not well-formed (after
    the records before the fault), go to ``report``; ``progress``: told (phase, the file's
    bytes read, its size) every 5,000 records."""
    tags = frozenset(wanted)
    n, phase, tick = 0, f"reading {path.name}", progress or (lambda *_: None)
    try:
        xml = _is_xml(path)  # an unreadable file: the package's error naming it
        size = path.stat().st_size
        with open_binary(path) as fh:
            records = (_xml_records(fh, tags) if xml
                       else _binary_records(fh, path, report, tags))
            raw = getattr(fh, "fileobj", None) or fh  # gzip: the compressed file's offset
            tick(phase, 0, size)
            for n, (leader, control, fields) in enumerate(records, 1):  # noqa: B007
                if n % 5000 == 0:
                    tick(phase, min(raw.tell(), size), size)
                yield n, leader, control, fields
        tick(phase, size, size)
    except ET.ParseError as exc:
        report.bad(str(path), f"not well-formed MARC-XML after {n} records ({exc})")
    except EOFError:
        report.bad(str(path), f"compressed data ends early after {n} records")
    except (gzip.BadGzipFile, zlib.error) as exc:
        report.bad(str(path), f"compressed data is corrupt after {n} records ({exc})")


def record_where(path: Path, n: int, control: str) -> str:
    """``path: record N (001 …)``: where a record's fault is reported."""
    return f"{path}: record {n}" + (f" (001 {control})" if control else "")
