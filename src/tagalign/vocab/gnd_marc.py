"""The GND as the DNB ships it: MARC 21 authority records, as MARC-XML
(``authorities-gnd-sachbegriff_dnbmarc_YYYYMMDD.mrc.xml.gz``) or binary ISO 2709 (``.mrc``).

Field mapping (MARC 21 authority format as the GND fills it; docs/formats.md shows a record):

===========================================  =============================================
``024 $a`` with ``$2 gnd``, else ``035 $a``   the GND id (``(DE-588)`` stripped)
``150 $a`` ``$g`` ``$x``                      preferred label, as the DNB displays it:
                                              ``a <g>``, subdivisions ``$x`` after `` / ``
                                              (other entity types: their own 1XX, below)
``450`` (same subfields)                      alternative labels
``550 $0 (DE-588)…`` with ``$4`` / ``$i``     broader (``ob…``: Oberbegriff allgemein,
                                              generisch, instantiell, partitiv) or related
                                              (``vbal`` and every other code)
``065 $a``                                    GND classification notation
``075 $b``                                    entity types (``s`` Sachbegriff; ``saz``…)
``677 $a``                                    definition
===========================================  =============================================

Narrower is the inverse of broader: the GND records only the upward link. By default only
subject headings are kept: records whose entity type (``075 $b`` with ``$2 gndgen``) is not
``s`` are skipped and counted, as are deleted, split or redirected records (leader/05
``d``, ``s``, ``x``) and records that are not authority records (leader/06).
``entity_types`` keeps others too (`ENTITY_TYPES`: ``g`` places 151/451/551, ``p`` persons
100/400/500, ``b`` corporate bodies 110/410/510, ``f`` conferences 111/411/511, ``u`` works
130/430/530 or a 100 with ``$t``), each with its 075 codes on the `Subject`
(``entity_types``). Their headings read ``$a`` and the subfields that tell two headings
apart as the DNB displays them: ``$b`` numeration or subordinate unit, ``$c`` a person's
title or territory, ``$n``/``$p`` a work's part, ``$t`` a work's title after the name
(`` / ``), ``$g`` and ``$x`` as above; dates (``$d``) are left out, as in the DNB's display.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tagalign.io import Reporter
from tagalign.runtime import ProgressCallback
from tagalign.vocab.authority_io import Fields, authority_records, record_where
from tagalign.vocab.loaders import default_report, register
from tagalign.vocab.subject import Subject

log = logging.getLogger(__name__)

GND_PREFIX = "(DE-588)"

#: GND entity types (075 $b, the ``gndgen`` code) → (preferred, alternative, related) tags
ENTITY_TYPES: dict[str, tuple[str, str, str]] = {
    "s": ("150", "450", "550"),  # Sachbegriff: subject headings (the default)
    "g": ("151", "451", "551"),  # Geografikum: places
    "p": ("100", "400", "500"),  # Person
    "b": ("110", "410", "510"),  # Körperschaft: corporate bodies
    "f": ("111", "411", "511"),  # Kongress: conferences, events
    "u": ("130", "430", "530"),  # Werk: works (also as 100 $a … $t …)
}
#: heading tags in the order a record's preferred label is looked for
_HEADINGS = tuple(tags[0] for tags in ENTITY_TYPES.values())
#: the fields read: the mapping's, and 682 (a redirect's or deletion's note, which the change
#: reader `tagalign.vocab.changes.marc` reads from the same records)
WANTED = frozenset({"024", "035", "065", "075", "677", "682",
                    *(tag for tags in ENTITY_TYPES.values() for tag in tags)})


def parse_entity_types(spec: str) -> frozenset[str] | None:
    """``"s,g,p"`` → those codes; ``"all"`` → None (every record's type is kept). Unknown
    codes: ValueError naming them and the known ones."""
    if spec.strip().lower() == "all":
        return None
    codes = frozenset(c.strip() for c in spec.split(",") if c.strip())
    unknown = sorted(codes - set(ENTITY_TYPES))
    if unknown or not codes:
        raise ValueError(f"unknown GND entity type(s) {', '.join(unknown) or repr(spec)}; "
                         f"use codes of {', '.join(ENTITY_TYPES)} separated by commas, "
                         "or all")
    return codes


@dataclass
class AuthorityCounts:
    """What a dump held: subject headings kept, other records skipped by kind."""

    subjects: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    #: headings kept by entity type (075 general code; ``s`` without 075)
    kept: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        line = f"{self.subjects} subject headings"
        if set(self.kept) - {"s"}:
            kinds = ", ".join(f"{k}: {n}" for k, n in self.kept.most_common())
            line = f"{self.subjects} headings ({kinds})"
        if self.skipped:
            kinds = ", ".join(f"{k}: {n}" for k, n in self.skipped.most_common())
            line += f"; {sum(self.skipped.values())} other records skipped ({kinds})"
        return line


# -- one record ----------------------------------------------------------------------------
def heading(subfields: list[tuple[str, str]]) -> str:
    """A 150/450 heading as the DNB displays it (and our GND TSV holds it):
    ``Wasserkopf <Pilz>``; qualifiers ``$g`` in one pair of angle brackets, ``$x`` after
    `` / ``. Characters are kept as the DNB writes them (umlauts often decomposed, as
    in the TSV): the same bytes as today's labels; searches and matching fold to NFC.
    Other entity types' headings (1XX/4XX): ``$b`` after a space (a person's numeration,
    ``Friedrich II.``) or ``. `` (a corporate body's unit), ``$c`` after ``, `` (a
    person's title), ``$n``/``$p`` after ``, ``, ``$t`` (a work's title) after `` / ``."""
    main = " ".join(v.strip() for c, v in subfields if c == "a" and v.strip())
    person = bool(main) and "," in main or any(c == "c" for c, _ in subfields)
    for c, v in subfields:
        v = v.strip()
        if not v:
            continue
        if c == "b":
            main += (" " if person else ". ") + v
        elif c in "cnp":
            main += ", " + v
        elif c == "t":
            main += " / " + v
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
            if c == "a" and v.startswith(GND_PREFIX) and v[len(GND_PREFIX):].strip():
                return v[len(GND_PREFIX):].strip()
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
    """(the related GND id, whether it is a broader term) of one 5XX."""
    target = next((v[len(GND_PREFIX):].strip() for c, v in sub
                   if c == "0" and v.startswith(GND_PREFIX)), None)
    codes = [v.strip() for c, v in sub if c == "4"]
    if codes:  # a code (obal) and the same relation as a URI (…gnd#broaderTermGeneral)
        broader = any(code.startswith("ob") or "#broaderTerm" in code for code in codes)
    else:  # only the phrase: "Oberbegriff allgemein" / "Verwandter Begriff"
        broader = any(c == "i" and v.startswith("Oberbegriff") for c, v in sub)
    return target or None, broader


def to_subject(fields: Fields, language: str = "de",
               types: tuple[str | None, list[str]] | None = None) -> Subject:
    """The `Subject` of one heading record; ValueError when it has no id or heading.
    ``types``: its `entity_types`, where the caller read them already."""
    sid = gnd_id(fields)
    if not sid:
        raise ValueError("no GND id (024 $2 gnd or 035 $a (DE-588)…)")
    general, codes = types if types is not None else entity_types(fields)
    head, alt_tag, rel_tag = ENTITY_TYPES.get(general or "s", ENTITY_TYPES["s"])
    label = next((h for h in map(heading, fields.get(head, [])) if h), "")
    if not label and general is not None and general != "s":  # a work as 100 $a $t, …
        label = next((h for tag in _HEADINGS for h in map(heading, fields.get(tag, []))
                      if h), "")
    if not label:
        raise ValueError(f"{sid}: no preferred label ({head} $a)")
    # a heading's own kind of 4XX and 5XX: a subject heading's 500/510 name persons and
    # bodies, not broader or related subjects (a work's names may be 400 $a $t too)
    alt_tags = (alt_tag, "400") if general == "u" else (alt_tag,)
    alts = list(dict.fromkeys(h for tag in alt_tags for h in map(heading, fields.get(tag, []))
                              if h and h != label))
    broader: list[str] = []
    related: list[str] = []
    for sub in fields.get(rel_tag, []):
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
                   definition=definition or None, entity_types=codes)


#: leader/05 (record status) of records that are no heading any more (MARC 21 authority
#: leader: d deleted, s deleted as split into two or more headings, x deleted as replaced by
#: another heading: the GND's redirects): why a vocabulary skips them
_GONE = {"d": "deleted", "s": "split", "x": "redirected"}
#: the entity types kept when none are asked for: subject headings
SUBJECT_HEADINGS = frozenset({"s"})


def skip_reason(leader: str, general: str | None,
                types: frozenset[str] | None = SUBJECT_HEADINGS) -> str | None:
    """Why a record is not kept (the kind it is counted under), or None. ``general``: its
    general entity type (`entity_types`); ``types``: the entity types kept (None: all). A
    record without 075 is taken as a subject heading (a dump cut down to some fields)."""
    if len(leader) > 6 and leader[6] != "z":
        return f"not an authority record (leader/06 {leader[6]!r})"
    status = leader[5] if len(leader) > 5 else ""
    if status in _GONE:
        return _GONE[status]
    if types is not None and (general or "s") not in types:
        return f"entity type {general}"
    return None


def read_authorities(path: Path, report: Reporter, counts: AuthorityCounts | None = None,
                     language: str = "de", types: frozenset[str] | None = SUBJECT_HEADINGS,
                     progress: ProgressCallback | None = None) -> Iterator[Subject]:
    """Headings of a MARC 21 authority file (MARC-XML or binary, gzipped or not: told by the
    bytes) of the entity ``types`` (default: subject headings; None: all), in file order;
    other records go to ``counts``, malformed ones and a file cut short to ``report``;
    ``progress``: told (phase, the file's bytes read, its size) every 5,000 records."""
    counts = counts if counts is not None else AuthorityCounts()
    for n, leader, control, fields in authority_records(path, report, WANTED, progress):
        kinds = entity_types(fields)  # 075 read once: skip, heading tags, counts
        reason = skip_reason(leader, kinds[0], types)
        if reason is not None:
            counts.skipped[reason] += 1
            continue
        try:
            subject = to_subject(fields, language, kinds)
        except ValueError as exc:
            report.bad(record_where(path, n, control), str(exc))
            continue
        counts.subjects += 1
        counts.kept[kinds[0] or "s"] += 1
        yield subject


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
def load_gnd_marc(path: Path, language: str = "de", report: Reporter | None = None,
                  entity_types: frozenset[str] | None = SUBJECT_HEADINGS,
                  progress: ProgressCallback | None = None) -> Iterator[Subject]:
    """The GND authority dump (see the module docstring), headings of ``entity_types``
    (`parse_entity_types`; None: all); logs how many records were kept and how many of
    which kind were skipped; ``progress``: `read_authorities`'."""
    counts = AuthorityCounts()
    subjects = with_narrower(list(read_authorities(
        Path(path), default_report(report), counts, language, entity_types, progress)))
    log.info("%s: %s", Path(path).name, counts.summary())
    return iter(subjects)
