"""The `Record` data class: one bibliographic record, the unit tagalign tags."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

MAX_TEXT_CHARS = 50_000
"""Longest input text (title + abstract, characters) a record is tagged on; longer text
is cut here with a warning. Real records stay far below it (the longest of the 110k
LLMs4Subjects train+dev records has 35,956), while a 20 MB "abstract" cannot exhaust
memory in tokenisers, label matching or encoders."""

EMPTY_WARNING = "empty title and abstract: no suggestions"


@dataclass(slots=True)
class Record:
    """A record's input text and, for training/evaluation, its gold subjects."""

    id: str
    title: str
    abstract: str = ""
    language: str | None = None
    type: str | None = None
    subjects: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    #: MARC: GND genre/form terms (655 ``$2 gnd-content``), never gold subjects
    genres: list[str] = field(default_factory=list)
    #: MARC: GND subjects a machine assigned (a 650 linked to an 883 "maschinell gebildet",
    #: ``aepgnd`` …: `tagalign.records.marc.provenance`); gold only when asked
    #: (``read_records(..., gold="machine")``): a tagger must not learn from its own kind
    machine_subjects: list[str] = field(default_factory=list)
    #: MARC: machine-made subjects a librarian confirmed (their 883 says so); gold when asked
    #: (``read_records(..., gold="confirmed")``, ``train --subjects confirmed``)
    confirmed_subjects: list[str] = field(default_factory=list)
    #: MARC: (first indicator, ``$a``) of the 883 that marks a subject, for each subject one
    #: marks, as the reader found it (``tagalign records stats`` counts them; `read_records`
    #: keeps it only when asked); not part of a record's identity or of its JSON
    processes: dict[str, tuple[str, str]] | None = field(default=None, compare=False)

    @property
    def text(self) -> str:
        """``title + " " + abstract``: the input text of every recipe (title first)."""
        return f"{self.title} {self.abstract}".strip()

    def to_json(self) -> dict:
        obj = {"id": self.id, "type": self.type, "lang": self.language, "title": self.title,
               "abstract": self.abstract, "subjects": list(self.subjects),
               "domains": list(self.domains)}
        if self.genres:  # only MARC records have them: other records' JSON is unchanged
            obj["genres"] = list(self.genres)
        if self.machine_subjects:
            obj["machine_subjects"] = list(self.machine_subjects)
        if self.confirmed_subjects:
            obj["confirmed_subjects"] = list(self.confirmed_subjects)
        return obj


class Checked(NamedTuple):
    """A record made safe to tag and its warning (`check_record`): a tagger takes these as
    they are (`tagalign.project.Tagger`), so a record is checked once on every path."""

    record: Record
    warning: str | None


def check_record(rec: Record, max_chars: int = MAX_TEXT_CHARS) -> Checked:
    """A record made safe to tag, and a warning for the user when it was degenerate.

    Empty text gets `EMPTY_WARNING` (the caller returns no suggestions rather than noise);
    text longer than ``max_chars`` is cut (title first, then abstract) and says so. Unknown
    language codes are left to the recipes, which detect the language as for none.
    """
    title, abstract = rec.title or "", rec.abstract or ""
    if not title.strip() and not abstract.strip():
        return Checked(rec, EMPTY_WARNING)
    n = len(title) + len(abstract)
    if n <= max_chars:
        return Checked(rec, None)
    title = title[:max_chars]
    abstract = abstract[:max_chars - len(title)]
    return Checked(replace(rec, title=title, abstract=abstract),
                   f"text truncated to {max_chars:,} of {n:,} characters")
