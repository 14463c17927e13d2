"""`PrefixIndex`: subjects by label prefix in any language, fast enough to type against.

Every preferred and alternate label of every language is casefolded (NFC first, so a
composed and a decomposed "ä" are one letter) and sorted once; a query is two binary
searches for the range of keys starting with the casefolded prefix, then a walk over
that range until ``limit`` distinct subjects are found. A query costs O(log n + limit
+ labels of the subjects skipped as duplicates), whatever the size of the vocabulary.

Within the range keys are in code-point order, so an exact match (the shortest key
with that prefix) comes first, then longer labels alphabetically.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from tagalign.vocab.subject import Subject

# above every character a casefolded key contains: "prefix" + this bounds the range
_TOP = "\U0010ffff"


def fold(text: str) -> str:
    """The form labels and queries are compared in: NFC, then casefolded, trimmed."""
    return unicodedata.normalize("NFC", text).casefold().strip()


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """One subject found by a prefix, with the label (and its language) that matched."""

    subject: Subject
    label: str
    language: str
    preferred: bool


class PrefixIndex:
    """Sorted casefolded labels of ``subjects`` (each a `Subject`) for prefix search."""

    def __init__(self, subjects: Iterable[Subject]):
        self.subjects: list[Subject] = list(subjects)
        keys: list[str] = []
        owner: list[int] = []  # subject position of each label
        self._labels: list[tuple[str, str, bool]] = []  # (label, language, preferred)
        for pos, s in enumerate(self.subjects):
            for lang, label in s.labels.items():
                keys.append(fold(label))
                owner.append(pos)
                self._labels.append((label, lang, True))
            for lang, alts in s.alt_labels.items():
                for alt in alts:
                    keys.append(fold(alt))
                    owner.append(pos)
                    self._labels.append((alt, lang, False))
        # a stable sort of label numbers by key (far quicker than sorting tuples): equal
        # keys keep vocabulary order, a subject's preferred labels before its alternates
        order = sorted(range(len(keys)), key=keys.__getitem__)
        self._keys: list[str] = [keys[i] for i in order]
        self._subject: list[int] = [owner[i] for i in order]
        self._label: list[int] = order

    def __len__(self) -> int:
        """Labels indexed."""
        return len(self._keys)

    def search(self, prefix: str, limit: int = 10) -> list[PrefixMatch]:
        """Up to ``limit`` distinct subjects with a label starting with ``prefix``
        (case-insensitive); a blank prefix finds nothing."""
        key = fold(prefix)
        if not key or limit <= 0:
            return []
        lo = bisect_left(self._keys, key)
        hi = bisect_left(self._keys, key + _TOP, lo)
        seen: set[int] = set()
        out: list[PrefixMatch] = []
        for i in range(lo, hi):
            pos = self._subject[i]
            if pos in seen:
                continue
            seen.add(pos)
            label, lang, preferred = self._labels[self._label[i]]
            out.append(PrefixMatch(self.subjects[pos], label, lang, preferred))
            if len(out) == limit:
                break
        return out

    def exact(self, label: str) -> list[PrefixMatch]:
        """Every subject with a label (preferred or alternate, any language) equal to
        ``label`` up to case: the keys equal to it come first in their range."""
        key = fold(label)
        if not key:
            return []
        out: list[PrefixMatch] = []
        seen: set[int] = set()
        i = bisect_left(self._keys, key)
        while i < len(self._keys) and self._keys[i] == key:
            pos = self._subject[i]
            if pos not in seen:
                seen.add(pos)
                text, lang, preferred = self._labels[self._label[i]]
                out.append(PrefixMatch(self.subjects[pos], text, lang, preferred))
            i += 1
        return out


__all__ = ["PrefixIndex", "PrefixMatch", "fold"]
