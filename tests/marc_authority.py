"""GND authority records built with pymarc as the DNB writes them (MARC 21 authority
format: 024/035 ids, 065, 075, 150/450 headings, 550 relations), for tests that need what
the real sample lacks (alternative labels, other entity types, broken records)."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

from pymarc import Field, Indicators, MARCWriter, Record, Subfield, XMLWriter

LEADER = "00000nz  a2200000nc 4500"
BLANK = Indicators(" ", " ")
RELATIONS = {"obge": ("broaderTermGeneric", "Oberbegriff generisch"),
             "obal": ("broaderTermGeneral", "Oberbegriff allgemein"),
             "vbal": ("relatedTerm", "Verwandter Begriff")}


def _heading(tag: str, label: str | tuple[str, str]) -> Field:
    """``label`` or ``(label, qualifier)`` as $a (and $g)."""
    main, qualifier = (label, None) if isinstance(label, str) else label
    subs = [Subfield("a", main)] + ([Subfield("g", qualifier)] if qualifier else [])
    return Field(tag, BLANK, subs)


def relation(gid: str, label: str, code: str | None, phrase: str | None = None) -> Field:
    """A 550 as the DNB writes it: three $0, $a, the code and its URI in $4, $w, $i;
    ``code=None`` leaves out $4 (only the phrase $i says what the relation is)."""
    subs = [Subfield("0", f"(DE-101){gid.replace('-', '')}"), Subfield("0", f"(DE-588){gid}"),
            Subfield("0", f"https://d-nb.info/gnd/{gid}"), Subfield("a", label)]
    if code:
        uri, phrase = RELATIONS[code][0], phrase or RELATIONS[code][1]
        subs += [Subfield("4", code),
                 Subfield("4", f"https://d-nb.info/standards/elementset/gnd#{uri}")]
    subs += [Subfield("w", "r"), Subfield("i", phrase or "")]
    return Field("550", BLANK, subs)


def authority(gid: str, label: str | tuple[str, str] | None, *,
              alts: Sequence[str | tuple[str, str]] = (), relations: Sequence[Field] = (),
              notations: Sequence[str] = (), types: Sequence[str] = ("s",),
              in_024: bool = True, leader: str = LEADER, heading_tag: str = "150",
              subdivisions: Sequence[str] = ()) -> Record:
    rec = Record(leader=leader)
    rec.add_field(Field("001", data=f"9{gid.replace('-', '')}"))
    rec.add_field(Field("003", data="DE-101"))
    if in_024:
        rec.add_field(Field("024", Indicators("7", " "), [
            Subfield("a", gid), Subfield("0", f"http://d-nb.info/gnd/{gid}"),
            Subfield("2", "gnd")]))
    rec.add_field(Field("035", BLANK, [Subfield("a", f"(DE-101)9{gid.replace('-', '')}")]))
    rec.add_field(Field("035", BLANK, [Subfield("a", f"(DE-588){gid}")]))
    rec.add_field(Field("035", BLANK, [Subfield("z", f"(DE-588c){gid}"),
                                       Subfield("9", "v:zg")]))
    for notation in notations:
        rec.add_field(Field("065", BLANK, [Subfield("a", notation), Subfield("2", "sswd")]))
    for i, t in enumerate(types):
        rec.add_field(Field("075", BLANK, [Subfield("b", t),
                                           Subfield("2", "gndgen" if i == 0 else "gndspec")]))
    if label is not None:
        head = _heading(heading_tag, label)
        for x in subdivisions:
            head.add_subfield("x", x)
        rec.add_field(head)
    for alt in alts:
        rec.add_field(_heading("450", alt))
    for rel in relations:
        rec.add_field(rel)
    rec.add_field(Field("670", BLANK, [Subfield("a", "Vorlage")]))
    return rec


def status(code: str) -> str:
    """The authority leader with record status (leader/05) ``code``."""
    return LEADER[:5] + code + LEADER[6:]


def field_682(text: str | None, target: tuple[str, str] | None = None) -> Field:
    """682 as the DNB fills it: the target linked by ``$0`` as every GND link is
    ((DE-101) record number, (DE-588) GND id, URI), ``$a`` its preferred name, ``$i`` the
    explanation ("Umlenkung", "Loeschung")."""
    subs = []
    if target is not None:
        gid, name = target
        subs += [Subfield("0", f"(DE-101){gid.replace('-', '')}"),
                 Subfield("0", f"(DE-588){gid}"), Subfield("0", f"https://d-nb.info/gnd/{gid}"),
                 Subfield("a", name)]
    if text is not None:
        subs.append(Subfield("i", text))
    return Field("682", BLANK, subs)


def shortened(gid: str, code: str, note: Field) -> Record:
    """A shortened record, as the DNB delivers a real redirect or deletion: "nur noch die
    notwendigsten Informationen (Identifier und Umlenkziel bzw. Hinweis auf Löschung)"."""
    rec = Record(leader=status(code))
    rec.add_field(Field("001", data=f"9{gid.replace('-', '')}"))
    rec.add_field(Field("003", data="DE-101"))
    rec.add_field(Field("035", BLANK, [Subfield("a", f"(DE-101)9{gid.replace('-', '')}")]))
    rec.add_field(Field("035", BLANK, [Subfield("a", f"(DE-588){gid}")]))
    rec.add_field(note)
    return rec


def with_682(rec: Record, note: Field) -> Record:
    rec.add_field(note)
    return rec


def small_dump() -> list[Record]:
    """Five subject headings, a person, a corporate body, a deleted heading and one without
    a preferred label: what `EXPECTED` and the counts of the tests describe."""
    return [
        authority("4000001-1", ("Bank", "Möbel"), alts=["Sitzbank", ("Bank", "Sitzmöbel")],
                  relations=[relation("4000003-3", "Möbel", "obge")],
                  notations=["27.20", "6.3a"], types=("s", "saz")),
        authority("4000002-2", "Holzschutz", alts=["Holzkonservierung", "Holzschutzverfahren"],
                  relations=[relation("4000003-3", "Möbel", None, "Oberbegriff allgemein"),
                             relation("4000004-4", "Pilze", "vbal")]),
        authority("4000003-3", "Möbel"),
        authority("4000004-4", "Pilze", alts=["Mykologie", "Pilze"], in_024=False,
                  relations=[relation("4000002-2", "Holzschutz", "vbal")]),
        authority("4000005-5", "Geschichte", subdivisions=["Quelle"]),
        authority("118621890", ("Tiemann, Walter", None), types=("p", "piz"),
                  heading_tag="100"),
        authority("2021270-8", "Gebr. Klingspor", types=("b", "kiz"), heading_tag="110"),
        authority("4000006-6", "Gelöscht", leader="00000dz  a2200000nc 4500"),
        authority("4000007-7", None),
    ]


def write_xml(path: Path, records: Sequence[Record], gz: bool = False) -> Path:
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as fh:
        writer = XMLWriter(fh)
        for rec in records:
            writer.write(rec)
        writer.close(close_fh=False)
    return path


def write_binary(path: Path, records: Sequence[Record], gz: bool = False) -> Path:
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as fh:
        writer = MARCWriter(fh)
        for rec in records:
            writer.write(rec)
    return path
