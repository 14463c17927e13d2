"""What gets encoded: ``title + " " + abstract`` for records; labels for subjects."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import overload

from tagalign.records import Record


def record_texts(records: Iterable[Record]) -> list[str]:
    return [r.text for r in records]


class RecordTexts(Sequence[str]):
    """The records' texts, each made when it is read (`Record.text` joins title and
    abstract into a new string): an encoder reading a million records a chunk at a time
    holds one chunk's texts, not 2.2 GB of them at once (issue 48)."""

    def __init__(self, records: Sequence[Record]):
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [r.text for r in self.records[i]]
        return self.records[i].text


def subject_texts(vocab, language: str = "de", with_alt: bool = False, sep: str = "; "
                  ) -> list[str]:
    """Preferred label in ``language`` (German when missing), optionally + alternates (R1)."""
    out = []
    for s in vocab.subjects:
        text = s.label(language)
        if with_alt:
            alts = s.alt_labels.get(language) or s.alt_labels.get("de") or []
            if alts:
                text = text + sep + sep.join(alts)
        out.append(text)
    return out
