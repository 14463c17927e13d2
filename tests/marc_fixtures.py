"""MARC 21 records built with pymarc for the MARC tests: a DNB-like bibliographic record
with people's subjects (650, an RSWK chain in 689), a genre (655) and machine-made subjects
(650 linked by $8 to an 883 "maschinell gebildet")."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from pymarc import Field, Indicators, MARCWriter, Subfield, XMLWriter
from pymarc import Record as MarcRecord

MARC_NS = "http://www.loc.gov/MARC21/slim"


def f(tag: str, ind: str, *subs: str) -> Field:
    """``f("650", " 7", "0", "(DE-588)…", "2", "gnd")``: subfields as code, value pairs."""
    pairs = [Subfield(subs[i], subs[i + 1]) for i in range(0, len(subs), 2)]
    return Field(tag, Indicators(ind[0], ind[1]), pairs)


def dnb_record(cn: str = "1234567890", agency: str | None = "DE-101", *,
               lang041: str | None = "ger", lang008: str = "ger",
               leader: str = "00000nam a2200000 c 4500") -> MarcRecord:
    rec = MarcRecord(leader=leader, force_utf8=True)
    rec.add_field(Field("001", data=cn))
    if agency:
        rec.add_field(Field("003", data=agency))
    rec.add_field(Field("008", data="210101s2021    gw ||||| |||| 00||||" + lang008 + "  "))
    if lang041:
        rec.add_field(f("041", "  ", "a", lang041))
    rec.add_field(f("245", "10", "a", "\x98Die\x9c Pilze am Fachwerk :", "b",
                    "Schäden und Schutz.", "n", "Teil 2", "p", "Holzschutz /",
                    "c", "Anna Muster"))
    rec.add_field(f("520", "  ", "a", "Holzzerstörende Pilze bedrohen Fachwerk."))
    rec.add_field(f("520", "  ", "a", "Second abstract."))
    rec.add_field(f("650", " 7", "0", "(DE-101)040463052", "0", "(DE-588)4046076-9",
                    "0", "https://d-nb.info/gnd/4046076-9", "a", "Pilze", "2", "gnd"))
    rec.add_field(f("650", " 7", "0", "4025741-1", "a", "Holzschutz", "2", "gnd"))
    rec.add_field(f("650", " 0", "a", "Fungi", "0", "sh85052449"))  # LCSH: no GND id
    rec.add_field(f("650", " 7", "8", "1\\p", "0", "(DE-588)4011455-7", "0",
                    "https://d-nb.info/gnd/4011455-7", "a", "Denkmalpflege", "2", "gnd"))
    rec.add_field(f("650", " 7", "8", "2\\p", "0", "(DE-588)4046076-9", "a", "Pilze",
                    "2", "gnd"))  # a person gave it too: it stays gold
    rec.add_field(f("655", " 7", "0", "(DE-588)4113937-9", "0",
                    "https://d-nb.info/gnd/4113937-9", "a", "Hochschulschrift",
                    "2", "gnd-content"))
    rec.add_field(f("689", "00", "0", "(DE-588)4071095-6", "a", "Fachwerkbau", "D", "s"))
    rec.add_field(f("689", "01", "0", "https://d-nb.info/gnd/4004927-9", "a", "Bauschaden"))
    rec.add_field(f("689", "0 ", "5", "DE-101"))
    rec.add_field(f("883", "1 ", "8", "1\\p", "a", "maschinell gebildet", "c", "0,50463",
                    "d", "20220131", "q", "DE-101"))
    rec.add_field(f("883", "1 ", "8", "2\\p", "a", "maschinell gebildet", "c", "0,41",
                    "d", "20220131", "q", "DE-101"))
    return rec


def plain_record(cn: str, title: str, agency: str | None = None) -> MarcRecord:
    rec = MarcRecord(leader="00000nam a2200000   4500", force_utf8=True)
    rec.add_field(Field("001", data=cn))
    if agency:
        rec.add_field(Field("003", data=agency))
    rec.add_field(f("245", "00", "a", title))
    return rec


def binary(records: list[MarcRecord]) -> bytes:
    buf = io.BytesIO()
    writer = MARCWriter(buf)
    for rec in records:
        writer.write(rec)
    return buf.getvalue()


def xml(records: list[MarcRecord]) -> bytes:
    buf = io.BytesIO()
    writer = XMLWriter(buf)
    for rec in records:
        writer.write(rec)
    writer.close(close_fh=False)
    return buf.getvalue()


def record_xml(rec: MarcRecord, prefix: str = "") -> str:
    """One ``<record>`` element, its elements with ``prefix`` (e.g. ``marc:``)."""
    from pymarc.marcxml import record_to_xml

    text = record_to_xml(rec).decode()
    return text.replace("<", f"<{prefix}").replace(f"<{prefix}/", f"</{prefix}") if prefix \
        else text


def sru(records: list[MarcRecord]) -> bytes:
    """An SRU 1.1 searchRetrieveResponse as DNB's SRU interface sends MARC-XML."""
    items = "".join(
        f"<srw:record><srw:recordSchema>MARC21-xml</srw:recordSchema>"
        f"<srw:recordPacking>xml</srw:recordPacking><srw:recordData>"
        f'{record_xml(r).replace("<record>", f"<record xmlns={chr(34)}{MARC_NS}{chr(34)}>", 1)}'
        f"</srw:recordData><srw:recordPosition>{i}</srw:recordPosition></srw:record>\n"
        for i, r in enumerate(records, 1))
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<srw:searchRetrieveResponse '
            'xmlns:srw="http://www.loc.gov/zing/srw/"><srw:version>1.1</srw:version>'
            f"<srw:numberOfRecords>{len(records)}</srw:numberOfRecords>\n<srw:records>\n"
            f"{items}</srw:records></srw:searchRetrieveResponse>\n").encode()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path
