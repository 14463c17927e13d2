"""The GND as the DNB ships it: MARC 21 authority records, as MARC-XML
(``authorities-gnd-sachbegriff_dnbmarc_YYYYMMDD.mrc.xml.gz``) or binary ISO 2709 (``.mrc``).

Field mapping (MARC 21 authority format as the GND fills it; docs/formats.md shows a record):

===========================================  =============================================
``024 $a`` with ``$2 gnd``, else ``035 $a``   the GND id (``(DE-588)`` stripped)
``150 $a`` ``$g`` ``$x``                      preferred label, as the DNB displays it:
                                              ``a <g>``, subdivisions ``$x`` after `` / ``
``450`` (same subfields)                      alternative labels
``550 $0 (DE-588)…`` with ``$4`` / ``$i``     broader (``ob…``: Oberbegriff allgemein,
                                              generisch, instantiell, partitiv) or related
                                              (``vbal`` and every other code)
``065 $a``                                    GND classification notation
``075 $b``                                    entity types (``s`` Sachbegriff; ``saz``…)
``677 $a``                                    definition
===========================================  =============================================

Narrower is the inverse of broader: the GND records only the upward link. Records whose
entity type (``075 $b`` with ``$2 gndgen``) is not ``s`` are skipped and counted, as are
deleted records (leader/05 ``d``) and records that are not authority records (leader/06).
"""

from __future__ import annotations

import gzip
import logging
import sys
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from tagalign.io import Reporter, iso2709, open_binary
from tagalign.vocab.loaders import default_report, register
from tagalign.vocab.subject import Subject

log = logging.getLogger(__name__)

#: a record's fields the mapping reads: tag → occurrences → (code, value) subfields
Fields = dict[str, list[list[tuple[str, str]]]]
_WANTED = frozenset({"024", "035", "065", "075", "150", "450", "550", "677"})
_BINARY_TAGS = _WANTED | {"001"}
_GND = "(DE-588)"


@dataclass
class AuthorityCounts:
    """What a dump held: subject headings kept, other records skipped by kind."""

    subjects: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        line = f"{self.subjects} subject headings"
        if self.skipped:
            kinds = ", ".join(f"{k}: {n}" for k, n in self.skipped.most_common())
            line += f"; {sum(self.skipped.values())} other records skipped ({kinds})"
        return line


# -- one record ----------------------------------------------------------------------------
def heading(subfields: list[tuple[str, str]]) -> str:
    """A 150/450 heading as the DNB displays it (and our GND TSV holds it):
    ``Wasserkopf <Pilz>``; qualifiers ``$g`` in one pair of angle brackets, ``$x`` after
    `` / ``. Characters are kept as the DNB writes them (umlauts often decomposed, as
    in the TSV): the same bytes as today's labels; searches and matching fold to NFC."""
    main = " ".join(v.strip() for c, v in subfields if c == "a" and v.strip())
    qualifiers = [v.strip() for c, v in subfields if c == "g" and v.strip()]
    if qualifiers:
        main += f" <{', '.join(qualifiers)}>"
    for c, v in subfields:
        if c == "x" and v.strip():
            main += " / " + v.strip()
    return main


def gnd_id(fields: Fields) -> str | None:
    """``024 $a`` of the ``$2 gnd`` occurrence, else the first ``035 $a (DE-588)…``."""
    for sub in fields.get("024", []):
        if ("2", "gnd") in sub:
            value = next((v.strip() for c, v in sub if c == "a" and v.strip()), None)
            if value:
                return value
    for sub in fields.get("035", []):
        for c, v in sub:  # $z holds cancelled ids: only $a counts
            if c == "a" and v.startswith(_GND) and v[len(_GND):].strip():
                return v[len(_GND):].strip()
    return None


def entity_types(fields: Fields) -> tuple[str | None, list[str]]:
    """(the general entity type, every ``075 $b`` code in order): ``("s", ["s", "saz"])``.
    The general type is the ``$2 gndgen`` occurrence's, else the first code."""
    codes: list[str] = []
    general = None
    for sub in fields.get("075", []):
        for c, v in sub:
            if c == "b" and v.strip():
                codes.append(sys.intern(v.strip()))  # a few codes, 200k times: one copy
                if ("2", "gndgen") in sub and general is None:
                    general = v.strip()
    return general or (codes[0] if codes else None), codes


def _relation(sub: list[tuple[str, str]]) -> tuple[str | None, bool]:
    """(the related GND id, whether it is a broader term) of one 550."""
    target = next((v[len(_GND):].strip() for c, v in sub if c == "0" and v.startswith(_GND)),
                  None)
    codes = [v.strip() for c, v in sub if c == "4"]
    if codes:  # a code (obal) and the same relation as a URI (…gnd#broaderTermGeneral)
        broader = any(code.startswith("ob") or "#broaderTerm" in code for code in codes)
    else:  # only the phrase: "Oberbegriff allgemein" / "Verwandter Begriff"
        broader = any(c == "i" and v.startswith("Oberbegriff") for c, v in sub)
    return target or None, broader


def to_subject(fields: Fields, language: str = "de") -> Subject:
    """The `Subject` of one subject-heading record; ValueError when it has no id or 150."""
    sid = gnd_id(fields)
    if not sid:
        raise ValueError("no GND id (024 $2 gnd or 035 $a (DE-588)…)")
    label = next((h for h in map(heading, fields.get("150", [])) if h), "")
    if not label:
        raise ValueError(f"{sid}: no preferred label (150 $a)")
    alts = list(dict.fromkeys(h for h in map(heading, fields.get("450", []))
                              if h and h != label))
    broader: list[str] = []
    related: list[str] = []
    for sub in fields.get("550", []):
        target, is_broader = _relation(sub)
        if target and target != sid:
            into = broader if is_broader else related
            if target not in into:
                into.append(target)
    notations = dict.fromkeys(sys.intern(v.strip()) for sub in fields.get("065", [])
                              for c, v in sub if c == "a" and v.strip())
    definition = " ".join(v.strip() for sub in fields.get("677", []) for c, v in sub
                          if c == "a" and v.strip())
    return Subject(sid, {language: label}, {language: alts} if alts else {}, broader,
                   related=related, classification=[(n, "") for n in notations],
                   definition=definition or None, entity_types=entity_types(fields)[1])


def skip_reason(leader: str, fields: Fields) -> str | None:
    """Why a record is not a subject heading (the kind it is counted under), or None.
    A record without 075 is taken as a subject heading (a dump cut down to some fields)."""
    if len(leader) > 6 and leader[6] != "z":
        return f"not an authority record (leader/06 {leader[6]!r})"
    if len(leader) > 5 and leader[5] == "d":
        return "deleted"
    general, _ = entity_types(fields)
    if general is not None and general != "s":
        return f"entity type {general}"
    return None


# -- reading the two encodings -------------------------------------------------------------
def _record_fields(record: ET.Element) -> tuple[str, str, Fields]:
    leader, control = "", ""
    fields: Fields = {}
    for child in record:
        name = child.tag.rpartition("}")[2]
        if name == "datafield":
            tag = child.get("tag", "")
            if tag in _WANTED:
                fields.setdefault(tag, []).append(
                    [(sf.get("code", ""), sf.text or "") for sf in child])
        elif name == "leader":
            leader = child.text or ""
        elif name == "controlfield" and child.get("tag") == "001":
            control = (child.text or "").strip()
    return leader, control, fields


def _is_record(tag: str) -> bool:
    return tag == "record" or tag.endswith("}record")


def _xml_records(fh: IO[bytes]) -> Iterator[tuple[str, str, Fields]]:
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
        for event in parser.read_events():
            elem = cast(ET.Element, event[-1])  # "start" events only: always an element
            if root is None:
                root = elem
                if _is_record(elem.tag):  # a file holding one bare record
                    pending = elem
                continue
            if _is_record(elem.tag):
                if pending is not None:
                    yield _record_fields(pending)
                pending = elem
                root.clear()  # drop the finished records (and the whitespace between)
        if error is not None:
            raise error
        if not data:
            break
    if pending is not None:
        yield _record_fields(pending)


def _binary_fields(chunk: bytes) -> tuple[str, str, Fields]:
    """(leader, 001, fields) of one ISO 2709 record; ValueError for a damaged leader or
    directory (`tagalign.io.iso2709`). The DNB writes UTF-8: a stray byte becomes U+FFFD."""
    control = ""
    fields: Fields = {}
    for tag, _, data, subfields in iso2709.fields(chunk, _BINARY_TAGS, errors="replace"):
        if data is not None:
            control = data.strip()
        else:
            fields.setdefault(tag, []).append(subfields)
    return chunk[:iso2709.LEADER].decode("ascii"), control, fields


def _binary_records(fh: IO[bytes], path: Path, report: Reporter
                    ) -> Iterator[tuple[str, str, Fields]]:
    """The same from ISO 2709: a damaged record is reported by its number and byte offset
    and costs that record only (the stream is cut at end-of-record marks)."""
    for _, _, record in iso2709.read_iso2709(fh, path, report, _binary_fields):
        yield record


def _is_xml(path: Path) -> bool:
    with open_binary(path) as fh:
        head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"<")


def read_authorities(path: Path, report: Reporter, counts: AuthorityCounts | None = None,
                     language: str = "de") -> Iterator[Subject]:
    """Subject headings of a MARC 21 authority file (MARC-XML or binary, gzipped or not: told
    by the bytes), in file order; non-subject records go to ``counts``, malformed ones and
    a file cut short to ``report``."""
    counts = counts if counts is not None else AuthorityCounts()
    n = 0
    try:
        xml = _is_xml(path)
        with open_binary(path) as fh:
            records = _xml_records(fh) if xml else _binary_records(fh, path, report)
            for n, (leader, control, fields) in enumerate(records, 1):  # noqa: B007
                kind = skip_reason(leader, fields)
                if kind is not None:
                    counts.skipped[kind] += 1
                    continue
                try:
                    subject = to_subject(fields, language)
                except ValueError as exc:
                    where = f"{path}: record {n}" + (f" (001 {control})" if control else "")
                    report.bad(where, str(exc))
                    continue
                counts.subjects += 1
                yield subject
    except ET.ParseError as exc:
        report.bad(str(path), f"not well-formed MARC-XML after {n} records ({exc})")
    except EOFError:
        report.bad(str(path), f"compressed data ends early after {n} records")
    except (gzip.BadGzipFile, zlib.error) as exc:
        report.bad(str(path), f"compressed data is corrupt after {n} records ({exc})")


def with_narrower(subjects: list[Subject]) -> list[Subject]:
    """Fill ``narrower`` from the others' ``broader`` (within the file), in file order."""
    index = {s.id: s for s in subjects}
    for s in subjects:
        for up in s.broader:
            parent = index.get(up)
            if parent is not None and s.id not in parent.narrower:
                parent.narrower.append(s.id)
    return subjects


@register("gnd-marc")
def load_gnd_marc(path: Path, language: str = "de", report: Reporter | None = None
                  ) -> Iterator[Subject]:
    """The GND authority dump (see the module docstring); logs how many records were
    subject headings and how many of which kind were skipped."""
    counts = AuthorityCounts()
    subjects = with_narrower(list(read_authorities(Path(path), default_report(report),
                                                   counts, language)))
    log.info("%s: %s", Path(path).name, counts.summary())
    return iter(subjects)
