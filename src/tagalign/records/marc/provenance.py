"""How a subject got into a record: MARC 21 field 883 (metadata provenance), read and written
the way the Deutsche Nationalbibliothek (DNB) uses it.

A subject field (650, 689, 084) names its provenance by a field link ``$8 N\\p``; the 883
with the same link says how the field was made: its first indicator is the *method of
assignment* (MARC 21, https://www.loc.gov/marc/bibliographic/bd883.html: blank no
information, ``0`` fully machine-generated, ``1`` partially machine-generated, ``2`` not
machine-generated, the last added by MARC Update 30 in 2020 at the German-speaking
community's request), its ``$a`` the *creation process*, a name each agency chooses.

**Reading** (`read_provenance`). The DNB's process names come from its page "Metadatenherkunft
in der DNB und in MARC 883"
(https://wiki.dnb.de/display/ILTIS/Metadatenherkunft+in+der+DNB+und+in+MARC+883, as of
August 2020; the codes as a public reader of DNB records lists them). A known name decides;
an unknown one (or none) is decided by the indicator:

=====================================================  ============  =========================
``$a`` (case and ``-`` ignored; ``-pa`` as without)    kind          why
=====================================================  ============  =========================
``maschinell gebildet``, ``aepgnd``, ``aeplcsh``       machine       DNB's automatic subject
                                                                     indexing (GND, LCSH)
``gndddc``, ``maschinell aus Konkordanz gebildet``     machine       derived by a machine from
                                                                     the DDC through a
                                                                     concordance (DNB: 883 1_)
``cgrwk``, ``thesozgnd``, ``stwgnd``                   machine       taken over or mapped by a
                                                                     process (culturegraph,
                                                                     TheSoz, STW), nobody
                                                                     chose them for this record
``dnb``                                                intellectual  DNB's intellectual work
`CONFIRMED_PROCESS`                                    confirmed     tagalign's, see below
``Übernahme aus paralleler Ausgabe``                   by indicator  says where, not who
any other name containing ``maschinell``               machine       DNB's descriptive form
any other name, or none                                by indicator  ``0``/``1`` machine,
                                                                     ``2`` intellectual, blank
                                                                     `BLANK_DEFAULT` (machine)
=====================================================  ============  =========================

``-pa``: the DNB page's code list gives every process (``dnb``, ``aepgnd``, ``gndddc``,
``cgrwk`` …) a ``-pa`` twin, and names the pre-2020 process "Übernahme aus paralleler
Ausgabe" (taken over from a parallel edition) beside them; we found no text that spells the
suffix out, so we read it as that: the same process, done on a parallel edition (print and
online) and copied over. A ``-pa`` code is read as its base code.

A blank indicator with an unknown process counts as machine-made: until 2020, MARC 21
defined 883 only for "data fields that have been fully or partially machine-generated", so
an 883 that says nothing more most likely marks a machine's work, and leaving a subject out
of training costs less than learning from a machine's.

**Writing** (`provenance_field`, `PROCESS`):

- machine (a suggestion nobody reviewed): ``883 0_ $a maschinell gebildet $c SCORE $d DATE
  $q AGENCY``: the process name of the DNB's machine-made subjects in its records (which
  carry 883 since January 2015), with ``0``, fully machine-generated (the culturegraph
  aggregator's test records, a DNB project, write ``883 0_ $a maschinell gebildet`` too).
- confirmed (a machine suggestion a librarian accepted): ``883 1_ $a maschinell gebildet,
  intellektuell bestätigt $d DATE $q AGENCY``: a machine proposed the subject, a person
  decided it, so partially machine-generated; the DNB page has no process for a reviewed
  suggestion, so the name is ours, in the DNB's descriptive German. A reader that only
  knows "maschinell" reads it as machine-made: it errs towards leaving it out of training.
- intellectual (a subject a librarian added by searching the vocabulary): ``883 2_ $a dnb
  $d DATE $q AGENCY``: not machine-generated, with the DNB page's process for intellectual
  subject indexing; ``$q`` says whose librarian.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from pymarc import Field, Indicators, Subfield

from tagalign.records.record import Record


class Provenance(StrEnum):
    """How a subject got into a record (see the module's tables)."""

    MACHINE = "machine"  #: made by a machine, nobody reviewed it
    CONFIRMED = "confirmed"  #: machine-made, then accepted by a librarian
    INTELLECTUAL = "intellectual"  #: chosen by a person (or no 883 says otherwise)


#: ``883 $a`` of a machine suggestion a librarian accepted (our name, see the module)
CONFIRMED_PROCESS = "maschinell gebildet, intellektuell bestätigt"

#: the ``883 $a`` tagalign writes for each kind
PROCESS: dict[Provenance, str] = {
    Provenance.MACHINE: "maschinell gebildet",
    Provenance.CONFIRMED: CONFIRMED_PROCESS,
    Provenance.INTELLECTUAL: "dnb",
}
#: the ``883`` first indicator tagalign writes for each kind (MARC 21: method of assignment)
INDICATOR: dict[Provenance, str] = {
    Provenance.MACHINE: "0", Provenance.CONFIRMED: "1", Provenance.INTELLECTUAL: "2"}

#: known process names (normalised by `process_key`) → kind; None: known, but it says where
#: a subject came from, not who chose it, so the indicator decides
KNOWN_PROCESSES: dict[str, Provenance | None] = {
    "maschinell gebildet": Provenance.MACHINE,
    "aepgnd": Provenance.MACHINE,
    "aeplcsh": Provenance.MACHINE,
    "gndddc": Provenance.MACHINE,
    "maschinell aus konkordanz gebildet": Provenance.MACHINE,
    "cgrwk": Provenance.MACHINE,
    "thesozgnd": Provenance.MACHINE,
    "stwgnd": Provenance.MACHINE,
    "dnb": Provenance.INTELLECTUAL,
    CONFIRMED_PROCESS: Provenance.CONFIRMED,
    "übernahme aus paralleler ausgabe": None,
}
#: by the first indicator, for a process `KNOWN_PROCESSES` does not decide
BY_INDICATOR: dict[str, Provenance] = {
    "0": Provenance.MACHINE, "1": Provenance.MACHINE, "2": Provenance.INTELLECTUAL}
#: a blank (or undefined) indicator and an unknown process: machine (see the module)
BLANK_DEFAULT = Provenance.MACHINE


def process_key(process: str) -> str:
    """A process name as `KNOWN_PROCESSES` holds it: lower case, spaces collapsed, a
    ``-pa`` suffix dropped, and, for codes without a space, hyphens too (``aep-gnd-pa`` →
    ``aepgnd``)."""
    key = " ".join(process.lower().split())
    key = key.removesuffix("-pa")
    return key if " " in key else key.replace("-", "")


def is_known_process(process: str | None) -> bool:
    """Whether `read_provenance` knows ``process`` by name (else the indicator decides)."""
    if not process:
        return False
    key = process_key(process)
    return key in KNOWN_PROCESSES or "maschinell" in key


def read_provenance(ind1: str, process: str | None) -> Provenance:
    """The kind of subject an 883 with first indicator ``ind1`` and ``$a`` ``process`` marks
    (the module's reading table): a known process decides, else the indicator."""
    if process:
        key = process_key(process)
        if key in KNOWN_PROCESSES:
            kind = KNOWN_PROCESSES[key]
            if kind is not None:
                return kind
        elif "maschinell" in key:
            return Provenance.MACHINE
    return BY_INDICATOR.get(ind1.strip(), BLANK_DEFAULT)


def format_score(score: float) -> str:
    """``883 $c``: six decimals with the DNB's decimal comma (``0,831200``)."""
    return f"{float(score):.6f}".replace(".", ",")


def provenance_field(kind: Provenance, link: int, *, date: str, agency: str,
                     score: float | None = None) -> Field:
    """The 883 tagalign writes for a field linked by ``$8 {link}\\p``: ``883 I_ $8 N\\p $a
    PROCESS [$c SCORE] $d DATE $q AGENCY`` with `INDICATOR` and `PROCESS` of ``kind`` (see
    the module); ``date`` ``YYYYMMDD``, ``agency`` a MARC organisation code (``DE-101``)."""
    kind = Provenance(kind)
    subs = [Subfield("8", f"{link}\\p"), Subfield("a", PROCESS[kind])]
    if score is not None:
        subs.append(Subfield("c", format_score(score)))
    subs += [Subfield("d", date), Subfield("q", agency)]
    return Field("883", Indicators(INDICATOR[kind], " "), subs)


#: how `ProvenanceCounts` names a subject no 883 marks, and an 883 without ``$a``
NO_883, NO_PROCESS = "(no 883)", "(no $a)"
#: the kinds from the most trusted to the least, as reports list them
KINDS = (Provenance.INTELLECTUAL, Provenance.CONFIRMED, Provenance.MACHINE)


@dataclass
class ProvenanceCounts:
    """What the reader decided over many records (``tagalign records stats``): subjects by
    kind, by (883 ``$a``, kind), and by (``$a``, ind1, kind) for the processes
    `read_provenance` does not know by name (the indicator, or `BLANK_DEFAULT` for a blank
    one, decided those)."""

    kinds: Counter[Provenance] = field(default_factory=Counter)
    processes: Counter[tuple[str, Provenance]] = field(default_factory=Counter)
    unknown: Counter[tuple[str, str, Provenance]] = field(default_factory=Counter)

    def add(self, rec: Record) -> None:
        marked = rec.processes or {}
        for kind, ids in zip(KINDS, (rec.subjects, rec.confirmed_subjects,
                                     rec.machine_subjects), strict=True):
            for sid in ids:
                self.kinds[kind] += 1
                if sid not in marked:
                    self.processes[NO_883, kind] += 1
                    continue
                ind1, process = marked[sid]
                self.processes[process or NO_PROCESS, kind] += 1
                if not is_known_process(process):
                    self.unknown[process or NO_PROCESS, ind1.strip() or "blank", kind] += 1
