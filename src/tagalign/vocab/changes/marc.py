"""The DNB's GND-Änderungsdienst: MARC 21 authority records (binary or MARC-XML, gzipped or
not), read as `Change`s.

What the records say, from the documentation (not from guessing):

- MARC 21 Authority leader/05, *record status* (loc.gov, "Leader", authority format):
  ``a`` increase in encoding level, ``c`` corrected or revised, ``d`` deleted, ``n`` new,
  ``p`` increase in encoding level from prepublication, ``s`` deleted; heading split into two
  or more headings, ``x`` deleted; heading replaced by another heading.
- MARC 21 Authority field 682, *Deleted Heading Information*: ``$a`` replacement heading,
  ``$i`` explanatory text, ``$0`` record control number.
- The GND's 682 (GND-Erfassungsleitfaden, 682: "Nummer und bevorzugter Name bzw. bevorzugte
  Benennung des Zielsatzes bei Umlenkung von Datensätzen"; Alma-D-A-CH MARC, authority 682
  "Änderungskennzeichnung von Datensätzen": ``$a`` the target's preferred name, ``$i``
  Erläuterung, ``$0`` Kontrollnummer des Zieldatensatzes, filled "wenn ein Datensatz
  aufgespalten, umgelenkt oder gelöscht werden soll"). ``$0`` comes as the DNB writes every
  link: ``(DE-101)`` the DNB's record number, ``(DE-588)`` the GND id, the GND URI.
- The DNB's page "GND-Änderungsdienst": redirects and deletions first come as an
  announcement (leader/05 ``c`` and 682 with "Umlenkung" or "Loeschung"), then as shortened
  records holding only the id and the target or the note of deletion, leader/05 ``x`` or
  ``d``; a split comes with leader/05 ``c`` too, its 682 naming the kind of split ("Je nach
  Art der Aufspaltung …").
- The kinds of split, as the GND's change coding names them (GND PICA field 010/008@
  "Änderungscodierung", wiki.dnb.de; the STA rule "Änderungskennzeichnung von Datensätzen
  – Aufspaltung", sta.dnb.de): "Aufspaltung ohne Umlenkung" (s), "Aufspaltung mit
  Umlenkung" (p), "Aufspaltung mit Teilumlenkung" (g), each naming its target record
  ("Zieldatensatz für Aufspaltung"). Two of them name a redirect too, so a 682 saying
  "Aufspaltung" is a split whatever else it says (not a redirect announced).

So: ``n``/``c``/``a``/``p`` without such a 682 → `Heading` (of the entity types asked for,
as the GND loader keeps them); ``c`` + 682 "Umlenkung"/"Loeschung" → `Announced`; ``c`` +
682 naming a split, or ``s`` → `Split`; ``x`` → `Redirected` (682 ``$0 (DE-588)…`` the
target, ``$a`` its name); ``d`` → `Deleted`. A record that is not an authority record
(leader/06) is skipped; one without a GND id, a heading record without a preferred label or
a redirect without its target is malformed (``path: record N (001 …): why``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from tagalign.io import Reporter
from tagalign.vocab.authority_io import Fields, authority_records, record_where
from tagalign.vocab.changes.model import (
    Announced,
    Change,
    Deleted,
    Heading,
    Redirected,
    Split,
)
from tagalign.vocab.changes.read import register_reader
from tagalign.vocab.gnd_marc import (
    GND_PREFIX,
    SUBJECT_HEADINGS,
    WANTED,
    entity_types,
    gnd_id,
    to_subject,
)
from tagalign.vocab.subject import GND_URI, normalize_subject_id

#: leader/05 of a record that is a heading in its current state
_HEADING_STATUS = frozenset("acnp")
_URIS = (GND_URI, "http://d-nb.info/gnd/")


def _note(fields: Fields) -> tuple[str, list[str], str | None]:
    """(682 ``$i`` text, the GND ids its ``$0`` names, ``$a``) of a record; empty when it
    has no 682."""
    text, targets, name = [], [], None
    for sub in fields.get("682", []):
        for code, value in sub:
            value = value.strip()
            if code == "i" and value:
                text.append(value)
            elif code == "a" and value and name is None:
                name = value
            elif code == "0" and value.startswith(GND_PREFIX):
                targets.append(value[len(GND_PREFIX):].strip())
            elif code == "0" and value.startswith(_URIS):
                targets.append(normalize_subject_id(value))
    return " ".join(text), list(dict.fromkeys(t for t in targets if t)), name


def _action(text: str) -> str | None:
    """What a 682 ``$i`` announces: ``redirect``, ``deletion``, ``split`` or None. The DNB
    writes "Umlenkung" and "Loeschung" (transliterated; "Löschung" reads the same) and
    names a split by its kind, "Aufspaltung ohne Umlenkung", "… mit Umlenkung" or "… mit
    Teilumlenkung" (see the module): read first, as two of them say "Umlenkung" too.
    "Split" (MARC 21's own word, leader/05 ``s``) reads as "Aufspaltung"."""
    low = text.lower()
    if "aufspalt" in low or "split" in low:
        return "split"
    if "umlenk" in low:
        return "redirect"
    if "loesch" in low or "lösch" in low:
        return "deletion"
    return None


def record_change(leader: str, fields: Fields, where: str,
                  types: frozenset[str] | None = SUBJECT_HEADINGS,
                  language: str = "de") -> Change | None:
    """The `Change` one record says (see the module docstring); None for a record that is
    not one of the entity ``types`` or not an authority record. ValueError names what a
    malformed one lacks."""
    if len(leader) > 6 and leader[6] != "z":
        return None
    status = leader[5] if len(leader) > 5 else " "
    sid = gnd_id(fields)
    if not sid:
        raise ValueError("no GND id (024 $2 gnd or 035 $a (DE-588)…)")
    text, targets, name = _note(fields)
    # a 682 is filled only when a record is to be split, redirected or deleted (Alma-D-A-CH):
    # one that names a target but no known explanation announces a redirect
    action = (_action(text) or ("redirect" if targets else None)) if status == "c" else None
    if status == "x":
        if not targets:
            raise ValueError("a redirect (leader/05 x) without its target's GND id "
                             "(682 $0 (DE-588)…)")
        return Redirected(id=sid, target=targets[0], target_label=name, where=where)
    if status == "d":
        return Deleted(id=sid, note=text, where=where)
    if status == "s" or action == "split":
        return Split(id=sid, targets=tuple(targets), note=text, where=where)
    if status not in _HEADING_STATUS:
        raise ValueError(f"record status (leader/05) {status!r} is none of MARC 21's "
                         "a, c, d, n, p, s, x")
    kinds = entity_types(fields)
    if types is not None and (kinds[0] or "s") not in types:
        return None
    if action in ("redirect", "deletion"):
        subject = to_subject(fields, language, kinds) if _has_heading(fields) else None
        return Announced(id=sid, action=action, target=targets[0] if targets else None,
                         target_label=name, subject=subject, where=where)
    return Heading(id=sid, subject=to_subject(fields, language, kinds), where=where)


def _has_heading(fields: Fields) -> bool:
    return any(tag.startswith("1") for tag in fields)


@register_reader
class MarcChanges:
    """MARC 21 authority records (the GND-Änderungsdienst, or a whole dump read as
    changes), of the entity ``types`` (default: subject headings; None: all)."""

    name: ClassVar[str] = "gnd-marc"

    def __init__(self, types: frozenset[str] | None = SUBJECT_HEADINGS,
                 language: str = "de") -> None:
        self.types, self.language = types, language

    def read(self, path: Path, report: Reporter) -> Iterator[Change]:
        for n, leader, control, fields in authority_records(path, report, WANTED):
            where = record_where(path, n, control)
            try:
                change = record_change(leader, fields, where, self.types, self.language)
            except ValueError as exc:
                report.bad(where, str(exc))
                continue
            if change is not None:
                yield change
