"""MARC written one record at a time: binary MARC 21 or a MARC-XML ``<collection>``.

pymarc serialises each record (`Record.as_marc`, `record_to_xml_node`); this module adds
what a stream and a safe file need: the collection's opening and closing tags, characters
neither format can carry (C0 controls: 0x1D-0x1F are MARC's own separators, XML 1.0 allows
none but tab and line breaks) replaced by U+FFFD, and binary MARC's size limits (a field of
at most 9,999 bytes, a record of at most 99,999), which pymarc does not check, refused.
`record_to_marc` is the inverse of `tagalign.records.marc.fields.record_from_marc` for
the fields a tagalign `Record` has; `subject_field` and `machine_note` build the fields
DNB writes for a machine-made subject; `domain_field` a domain's 084.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import IO

from pymarc import Field, Indicators, Subfield
from pymarc import Record as MarcRecord
from pymarc.marcxml import record_to_xml_node

from tagalign.errors import InputError
from tagalign.records.marc.fields import (
    DOMAIN_SOURCE,
    GND_ISIL,
    GND_URI,
    split_record_id,
)
from tagalign.records.marc.language import marc_code
from tagalign.records.marc.provenance import Provenance, provenance_field
from tagalign.records.record import Record

MARC_XML_NS = "http://www.loc.gov/MARC21/slim"
XML_HEAD = (f'<?xml version="1.0" encoding="UTF-8"?>\n<collection xmlns="{MARC_XML_NS}">\n'
            ).encode()
XML_TAIL = b"</collection>\n"
FORMATS = ("marc", "marcxml")
MAX_FIELD, MAX_RECORD = 9_999, 99_999
_UNWRITABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
_LINK = re.compile(r"^(\d+)(?:\.\d+)?\\")
_LEVEL = {"Article": "a", "Book": "m", "Thesis": "m", "Conference": "m", "Report": "m",
          "Serial": "s"}
_TYPE_GENRE = {"Thesis": "Hochschulschrift", "Conference": "Konferenzschrift",
               "Report": "Forschungsbericht"}


def _clean(value: str) -> str:
    return _UNWRITABLE.sub("\ufffd", value) if _UNWRITABLE.search(value) else value


def sanitize(rec: MarcRecord) -> MarcRecord:
    """Replace, in place, the characters neither format can carry (see the module)."""
    for field in rec.fields:
        if field.control_field:
            field.data = _clean(field.data or "")
        else:
            field.subfields = [Subfield(c, _clean(v)) for c, v in field.subfields]
    return rec


def marc_bytes(rec: MarcRecord, fmt: str) -> bytes:
    """One record as written: ISO 2709 bytes (``marc``) or a ``<record>`` line (``marcxml``,
    for inside `XML_HEAD` … `XML_TAIL`); raises `InputError` past binary MARC's limits."""
    sanitize(rec)
    if fmt == "marcxml":
        return ET.tostring(record_to_xml_node(rec), encoding="unicode").encode() + b"\n"
    data = rec.as_marc()
    if len(data) > MAX_RECORD:
        raise InputError(f"record {_cn(rec)}: {len(data):,} bytes, more than binary MARC's "
                         f"{MAX_RECORD:,}: write MARC-XML (.xml) instead")
    base = int(data[12:17])
    if base - 25 != 12 * len(rec.fields):  # a 5-digit field length shifted the directory
        raise InputError(f"record {_cn(rec)}: a field longer than binary MARC's {MAX_FIELD:,} "
                         "bytes: write MARC-XML (.xml) instead")
    return data


def _cn(rec: MarcRecord) -> str:
    field = rec.get("001")
    return field.data if field is not None and field.data else "without 001"


class MarcWriter:
    """Records written to ``fh`` one at a time (``fmt``: ``marc`` or ``marcxml``); `close`
    ends the XML collection (the caller closes ``fh``). ``head=False``: ``fh`` already holds
    the collection's opening (a resumed file)."""

    def __init__(self, fh: IO[bytes], fmt: str, head: bool = True):
        if fmt not in FORMATS:
            raise ValueError(f"unknown MARC format {fmt!r}; use one of {FORMATS}")
        self.fh, self.fmt = fh, fmt
        if fmt == "marcxml" and head:
            fh.write(XML_HEAD)

    def write(self, rec: MarcRecord) -> None:
        self.fh.write(marc_bytes(rec, self.fmt))

    def close(self) -> None:
        if self.fmt == "marcxml":
            self.fh.write(XML_TAIL)


def next_link(rec: MarcRecord) -> int:
    """The first field-link number (``$8 N\\p``) the record does not use yet."""
    used = [int(m.group(1)) for f in rec.fields if not f.control_field
            for c, v in f.subfields if c == "8" and (m := _LINK.match(v))]
    return max(used, default=0) + 1


def subject_field(sid: str, label: str | None, link: int | None = None) -> Field:
    """``650 _7 [$8 N\\p] $0 (DE-588)ID $0 https://d-nb.info/gnd/ID $a LABEL $2 gnd``."""
    subs = [Subfield("8", f"{link}\\p")] if link is not None else []
    subs += [Subfield("0", GND_ISIL + sid), Subfield("0", GND_URI + sid)]
    if label is not None:
        subs.append(Subfield("a", label))
    subs.append(Subfield("2", "gnd"))
    return Field("650", Indicators(" ", "7"), subs)


def domain_field(code: str, link: int | None = None) -> Field:
    """``084 __ [$8 N\\p] $a CODE $2 linsearch``: a record's domain (`DOMAIN_SOURCE`)."""
    subs = [Subfield("8", f"{link}\\p")] if link is not None else []
    return Field("084", Indicators(" ", " "), [*subs, Subfield("a", code),
                                               Subfield("2", DOMAIN_SOURCE)])


def machine_note(link: int, score: float | None, date: str, agency: str) -> Field:
    """``883 0_ $8 N\\p $a maschinell gebildet $c SCORE $d YYYYMMDD $q ORG``: a suggestion
    nobody has reviewed (`provenance_field` of a machine's subject; the module
    `tagalign.records.marc.provenance` says why these codes)."""
    return provenance_field(Provenance.MACHINE, link, date=date, agency=agency, score=score)


def parse_score(text: str) -> float:
    return float(text.replace(",", "."))


def control_fields(rid: str) -> list[Field]:
    """001 (and 003) of a record id: ``(DE-101)123`` → 001 ``123``, 003 ``DE-101``."""
    cn, agency = split_record_id(rid)
    return [Field("001", data=cn)] + ([Field("003", data=agency)] if agency else [])


def _pieces(text: str, limit: int) -> list[str]:
    """``text`` cut at spaces into pieces of at most ``limit`` UTF-8 bytes (binary MARC's
    field limit); joined by one space they give ``text`` back."""
    out = []
    while len(text.encode()) > limit:
        head = text.encode()[:limit].decode("utf-8", "ignore")
        cut = head.rfind(" ")
        cut = cut if cut > 0 else len(head)
        out.append(text[:cut])
        text = text[cut + 1 if cut < len(text) and text[cut] == " " else cut:]
    return [*out, text]


def record_to_marc(rec: Record, labels: Callable[[str], str | None] | None = None,
                   date: str = "00000000", agency: str = "tagalign") -> MarcRecord:
    """A tagalign `Record` as a MARC record that `record_from_marc` reads back the same: 001
    (003), 008/35-37 and 041 language, 245 title, 520 abstract (cut into fields of binary
    MARC's size), leader/07 and a 655 for the type, 650 gold subjects (``$a`` from
    ``labels`` when it knows the id), machine and confirmed subjects each linked to its
    883 (`provenance_field`), 655 genres, 084 domains."""
    lang = marc_code(rec.language)
    leader = f"00000na{_LEVEL.get(rec.type or '', ' ')} a2200000 u 4500"
    out = MarcRecord(leader=leader, force_utf8=True)
    out.add_field(*control_fields(rec.id), Field("008", data=" " * 35 + lang + "  "))
    out.add_field(Field("041", Indicators(" ", " "), [Subfield("a", lang)]))
    out.add_field(*(domain_field(code) for code in rec.domains))
    out.add_field(Field("245", Indicators("0", "0"), [Subfield("a", rec.title)]))
    if rec.abstract:
        out.add_field(*(Field("520", Indicators(" ", " "), [Subfield("a", piece)])
                        for piece in _pieces(rec.abstract, MAX_FIELD - 16)))
    label = labels or (lambda sid: None)
    for sid in rec.subjects:
        out.add_field(subject_field(sid, label(sid)))
    marked = [(sid, Provenance.MACHINE) for sid in rec.machine_subjects]
    marked += [(sid, Provenance.CONFIRMED) for sid in rec.confirmed_subjects]
    for i, (sid, _) in enumerate(marked, 1):
        out.add_field(subject_field(sid, label(sid), i))
    if rec.type in _TYPE_GENRE:
        out.add_field(Field("655", Indicators(" ", "7"), [
            Subfield("a", _TYPE_GENRE[rec.type]), Subfield("2", "gnd-content")]))
    for gid in rec.genres:
        out.add_field(Field("655", Indicators(" ", "7"), [
            Subfield("0", GND_ISIL + gid), Subfield("2", "gnd-content")]))
    for i, (_, kind) in enumerate(marked, 1):
        out.add_field(provenance_field(kind, i, date=date, agency=agency))
    return out
