"""The `Subject` data class and GND id normalisation."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

#: the GND's URI prefix: ``GND_URI + id`` is a subject's URI (Annif's results, the web page)
GND_URI = "https://d-nb.info/gnd/"
_PREFIXES = (
    GND_URI,
    "http://d-nb.info/gnd/",
    "gnd:",
)
_GND_ID = re.compile(r"^[0-9X-]+[0-9Xx]$")


def normalize_subject_id(raw: str) -> str:
    """Bare GND id (``4015065-3``) from ``gnd:``, ``http(s)://d-nb.info/gnd/`` or ``<uri>`` forms.

    Ids from other vocabularies are returned stripped of angle brackets and whitespace.
    Interned (`sys.intern`): a training set names each subject thousands of times, and
    one string per id instead of one per mention is 0.5 GB less at 1M records (issue 48).
    """
    s = raw.strip()
    if s.startswith("<") and s.endswith(">"):
        s = s[1:-1].strip()
    for prefix in _PREFIXES:
        if s.startswith(prefix):
            return sys.intern(s[len(prefix):])
    return sys.intern(s)


@dataclass(slots=True)
class Subject:
    """One subject heading: labels per language plus its place in the vocabulary graph."""

    id: str
    labels: dict[str, str]
    alt_labels: dict[str, list[str]] = field(default_factory=dict)
    broader: list[str] = field(default_factory=list)
    narrower: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    classification: list[tuple[str, str]] = field(default_factory=list)
    definition: str | None = None
    #: the authority file's entity type codes (GND 075: ``s`` Sachbegriff, then the
    #: specific one, e.g. ``saz``); empty for formats that carry none
    entity_types: list[str] = field(default_factory=list)

    def label(self, language: str | None = None, fallback: str = "de") -> str:
        """Preferred label in ``language``, else ``fallback``, else any label, else the id."""
        if language and language in self.labels:
            return self.labels[language]
        if fallback in self.labels:
            return self.labels[fallback]
        return next(iter(self.labels.values()), self.id)

    def all_labels(self, language: str | None = None) -> list[str]:
        """Preferred and alternate labels (of one language, or of all)."""
        langs = [language] if language else list(self.labels) + [
            lang for lang in self.alt_labels if lang not in self.labels]
        out: list[str] = []
        for lang in langs:
            if lang in self.labels:
                out.append(self.labels[lang])
            out.extend(self.alt_labels.get(lang, []))
        return out
