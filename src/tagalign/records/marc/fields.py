"""A MARC 21 bibliographic record (a pymarc `Record`) as a tagalign `Record`.

- ``id``: 001, as ``(003)001`` when the record has a 003; without 001, the first 035 $a.
- ``title``: 245 $a $b $n $p (ISBD's closing `` /`` dropped).
- ``abstract``: 520 $a, every 520 joined by a space.
- ``language``: 041 $a, else 008/35-37, as ISO 639-1 where known (`marc_language`).
- ``type``: for text (leader/06 a or t; 336 $b txt when the leader has no type) Thesis
  (502, 655 Hochschulschrift), Conference (111, 711, 655 Konferenzschrift), Report (088,
  655 Forschungsbericht), else by leader/07 (a, b Article; m, c, d Book; s Serial); other
  media by leader/06 (Video, Audio, Map, …).
- ``subjects``: GND ids of 650 and 689 (RSWK chains): ``$0 (DE-588)ID`` or
  ``$0 https://d-nb.info/gnd/ID``, a bare id when the 650 says ``$2 gnd``.
- Kept apart by provenance: ``subjects`` are those a person chose (a field no 883 names,
  or one an 883 marks as intellectual), ``confirmed_subjects`` machine-made ones a
  librarian confirmed, ``machine_subjects`` a machine's (``maschinell gebildet``,
  ``aepgnd``, ``gndddc`` …, or an unknown process with 883 ind1 0, 1 or blank):
  `tagalign.records.marc.provenance` has the table. An id in several fields takes the most
  trusted kind (intellectual, confirmed, machine), a field linked to several 883s the
  least. ``processes``: the 883 (ind1, ``$a``) of each subject an 883 marks.
- ``genres``: GND ids of 655 (``$2 gnd-content``).
- ``domains``: 084 ``$a`` of a field that says ``$2 linsearch`` (`DOMAIN_SOURCE`: the
  LinSearch subject groups the LLMs4Subjects domains are), unless an 883 its link names
  reads as machine-made (domains `tagalign suggest --domains` wrote are not gold).

Walks the fields once (the reading speed of a dump depends on it); nothing here raises on
odd data except a record without any control number (`NoControlNumber`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Sequence

from pymarc import Record as MarcRecord

from tagalign.errors import InputError
from tagalign.records.marc.language import marc_language
from tagalign.records.marc.provenance import Provenance, read_provenance
from tagalign.records.record import Record

GND_ISIL = "(DE-588)"
GND_URI = "https://d-nb.info/gnd/"
#: the 084 ``$2`` of a record's domains (TIB's LinSearch codes: ``lit``, ``his`` …)
DOMAIN_SOURCE = "linsearch"
#: the non-sorting marks around a leading article (MARC-8's and Unicode's), not text
_NON_SORT = re.compile("[\x88\x89\x98\x9c]")
_BARE_GND = re.compile(r"^[0-9X-]+[0-9Xx]$")
_MEDIA = {"c": "Score", "d": "Score", "e": "Map", "f": "Map", "g": "Video", "i": "Audio",
          "j": "Audio", "k": "Image", "m": "Software", "o": "Kit", "p": "Kit", "r": "Object"}
_LEVEL = {"a": "Article", "b": "Article", "m": "Book", "c": "Book", "d": "Book",
          "s": "Serial"}
#: GND content types (655 $a) that say what kind of text a record is, as RSWK assigns them
GENRE_TYPES = {"hochschulschrift": "Thesis", "konferenzschrift": "Conference",
               "forschungsbericht": "Report"}


#: the fields `record_from_fields` reads (the fast binary decoder skips all others)
MAPPED_TAGS = frozenset({"001", "003", "008", "035", "041", "084", "088", "111", "245", "336",
                         "502", "520", "650", "655", "689", "711", "883"})


class NoControlNumber(InputError):
    """A record with neither 001 nor 035 $a: its suggestions could not be matched to it."""


def control_number_id(cn: str, agency: str | None) -> str:
    """The record id of a 001 and 003: ``(DE-101)123`` (``123`` without an agency)."""
    return f"({agency}){cn}" if agency else cn


def split_record_id(rid: str) -> tuple[str, str | None]:
    """The inverse of `control_number_id`: ``(DE-101)123`` → (``123``, ``DE-101``)."""
    if rid.startswith("(") and ")" in rid[1:-1]:
        agency, _, cn = rid[1:].partition(")")
        if agency and cn:
            return cn, agency
    return rid, None


def gnd_id(value: str, bare: bool = False) -> str | None:
    """The GND id in a ``$0``: ``(DE-588)ID``, a d-nb.info URI, or (``bare``) the id alone;
    None for other authorities (``(DE-101)…``, ``(DE-627)…``). Interned, as
    `normalize_subject_id` makes them (one string per subject, not per mention)."""
    v = value.strip()
    if v.startswith(GND_ISIL):
        v = v[len(GND_ISIL):].strip()
    elif "d-nb.info/gnd/" in v:
        v = v.rsplit("d-nb.info/gnd/", 1)[1].strip().rstrip("/")
    elif not (bare and _BARE_GND.match(v)):
        return None
    return sys.intern(v) if v else None


#: one field as the mapping reads it: (tag, first indicator, control field data or None,
#: subfields as (code, value) pairs); pymarc's fields and the fast binary decoder give these
MarcField = tuple[str, str, "str | None", Sequence[tuple[str, str]]]


def _sub(subfields: Sequence[tuple[str, str]], code: str) -> list[str]:
    return [v for c, v in subfields if c == code]


def _title(subfields: Sequence[tuple[str, str]]) -> str:
    out = ""
    for code, value in subfields:
        if code not in "abnp":
            continue
        # spaces only: other white space (U+2003 …) is the title's own, as in JSONL
        v = (_NON_SORT.sub("", value) if _NON_SORT.search(value) else value).strip(" ")
        if not v:
            continue
        if out:
            if code == "b" and not out.endswith((":", ";", "=")):
                out += " :"
            elif code in "np" and not out.endswith((".", ",", ":", ";")):
                out += "."
            out += " "
        out += v
    return out.removesuffix("/").rstrip(" ")


#: kinds from the least trusted to the most: a field takes the least of its 883s, an id the
#: most of its fields
_TRUST = {Provenance.MACHINE: 0, Provenance.CONFIRMED: 1, Provenance.INTELLECTUAL: 2}
#: (kind, process) of a field no 883 names: a person's
_PERSON: tuple[Provenance, tuple[str, str] | None] = (Provenance.INTELLECTUAL, None)
#: an 883 as the reader keeps it: (kind, (ind1, $a))
_Note = tuple[Provenance, tuple[str, str]]


def _field_provenance(links: list[str], notes: dict[str, _Note]
                      ) -> tuple[Provenance, tuple[str, str] | None]:
    """(kind, (883 ind1, $a)) of a field with ``$8`` ``links``, by the 883s that name them."""
    found = [notes[link] for link in links if link in notes]
    return min(found, key=lambda n: _TRUST[n[0]]) if found else _PERSON


def _split_by_provenance(linked: list[tuple[list[str], list[str]]], notes: dict[str, _Note]
                         ) -> tuple[dict[Provenance, list[str]], dict[str, tuple[str, str]]]:
    """The subject ids of each kind (each in the order of the fields of that kind) and, for
    those an 883 marks, its process."""
    fields = [(*(_field_provenance(links, notes) if notes else _PERSON), ids)
              for ids, links in linked]
    best: dict[str, Provenance] = {}
    for kind, _, ids in fields:
        for sid in ids:
            if sid not in best or _TRUST[kind] > _TRUST[best[sid]]:
                best[sid] = kind
    out: dict[Provenance, dict[str, None]] = {kind: {} for kind in _TRUST}
    processes: dict[str, tuple[str, str]] = {}
    for kind, process, ids in fields:
        for sid in ids:
            if best[sid] is kind and sid not in out[kind]:
                out[kind][sid] = None
                if process is not None:
                    processes[sid] = process
    return {kind: list(ids) for kind, ids in out.items()}, processes


def _type(leader: str, tags: set[str], content: str | None, genre: str | None) -> str | None:
    kind, level = leader[6:7], leader[7:8]
    if kind not in ("a", "t"):
        if kind in _MEDIA:
            return _MEDIA[kind]
        if content != "txt":  # no type in the leader: 336 $b decides whether it is text
            return None
    if "502" in tags or genre == "Thesis":
        return "Thesis"
    if "111" in tags or "711" in tags or genre == "Conference":
        return "Conference"
    if "088" in tags or genre == "Report":
        return "Report"
    return _LEVEL.get(level)


def pymarc_fields(marc: MarcRecord) -> Iterator[MarcField]:
    """A pymarc record's fields as `MarcField`s."""
    for f in marc.fields:
        ind = f.indicators.first if f.indicators is not None else " "
        yield f.tag, ind, f.data if f.control_field else None, f.subfields


def record_from_marc(marc: MarcRecord) -> Record:
    """One tagalign `Record` of a pymarc record (see the module's table)."""
    return record_from_fields(str(marc.leader), pymarc_fields(marc))


def record_from_fields(leader: str, fields: Iterable[MarcField]) -> Record:
    """One tagalign `Record` (see the module's table); raises `NoControlNumber`."""
    cn = agency = lang008 = lang041 = system = content = genre = None
    title = ""
    abstracts: list[str] = []
    tags: set[str] = set()
    linked: list[tuple[list[str], list[str]]] = []  # (GND ids, $8 links) of 650/689
    coded: list[tuple[list[str], list[str]]] = []  # (domain codes, $8 links) of 084
    genres: list[str] = []
    notes: dict[str, _Note] = {}  # $8 link → its 883
    for tag, ind1, data, subs in fields:
        tags.add(tag)
        if data is not None:
            if tag == "001":
                cn = data.strip() or None
            elif tag == "003":
                agency = data.strip() or None
            elif tag == "008" and len(data) >= 38:
                lang008 = data[35:38]
            continue
        if tag == "650" or tag == "689":
            bare = tag == "650" and any(v.strip().lower() == "gnd" for v in _sub(subs, "2"))
            ids = [i for c, v in subs if c == "0" and (i := gnd_id(v, bare)) is not None]
            if ids:
                linked.append((ids, [v.strip() for c, v in subs if c == "8"]))
        elif tag == "084":
            if any(v.strip().lower() == DOMAIN_SOURCE for v in _sub(subs, "2")):
                coded.append(([v.strip() for v in _sub(subs, "a") if v.strip()],
                              [v.strip() for c, v in subs if c == "8"]))
        elif tag == "245":
            title = title or _title(subs)
        elif tag == "520":
            # kept as they are: an abstract cut into several 520s joins back the same
            abstracts += [v for c, v in subs if c == "a" and v.strip()]
        elif tag == "655":
            genres += [i for c, v in subs if c == "0" and (i := gnd_id(v)) is not None]
            genre = genre or next((GENRE_TYPES[k] for v in _sub(subs, "a")
                                   if (k := v.strip().lower()) in GENRE_TYPES), None)
        elif tag == "883":
            process = next((v.strip() for v in _sub(subs, "a")), "")
            note = (read_provenance(ind1, process), (ind1, process))
            for link in _sub(subs, "8"):
                notes[link.strip()] = note
        elif tag == "041":
            lang041 = lang041 or next(iter(_sub(subs, "a")), None)
        elif tag == "035":
            system = system or next((v.strip() for v in _sub(subs, "a") if v.strip()), None)
        elif tag == "336":
            content = content or next(iter(_sub(subs, "b")), None)
    kinds, processes = _split_by_provenance(linked, notes)
    domains = [code for codes, links in coded
               if _field_provenance(links, notes)[0] is not Provenance.MACHINE
               for code in codes]
    if cn is not None:
        rid = control_number_id(cn, agency)
    elif system is not None:
        rid = system
    else:
        raise NoControlNumber("no control number (001) and no 035 $a")
    return Record(
        id=rid, title=title, abstract=" ".join(abstracts),
        language=marc_language(lang041) or marc_language(lang008),
        type=_type(leader, tags, content, genre),
        subjects=kinds[Provenance.INTELLECTUAL],
        genres=list(dict.fromkeys(genres)), domains=[sys.intern(d) for d in dict.fromkeys(domains)],
        confirmed_subjects=kinds[Provenance.CONFIRMED],
        machine_subjects=kinds[Provenance.MACHINE],
        processes=processes or None)
