"""What happened to a vocabulary's headings: one `Change` per heading, folded into a
`ChangeSet` in the order the change files were given.

The kinds follow what the DNB's GND-Änderungsdienst delivers (dnb.de, "GND-Änderungsdienst":
*Neuansetzungen, Korrekturen, Umlenkungen, Aufspaltungen, Löschungen*) and what the MARC 21
authority leader/05 (record status) says: ``n`` new, ``c`` corrected or revised, ``a``/``p``
increase in encoding level (a `Heading` each: a record in its state at selection time);
``x`` deleted, heading replaced by another heading (`Redirected`); ``s`` deleted, heading
split into two or more headings, or a ``c`` record whose 682 names a split (`Split`); ``d``
deleted (`Deleted`); a ``c`` record whose field 682 says "Umlenkung" or "Loeschung"
(`Announced`): the DNB first announces a redirect or a deletion that way and delivers the
shortened record (``x``, ``d``) a week later. SKOS vocabularies say the same with
``owl:deprecated true`` and ``dct:isReplacedBy`` (`tagalign.vocab.changes.skos`).

Folding: a later change of an id replaces an earlier one (the DNB's weekly file holds each
record's last state, and a later week's file a later state), so an announcement followed by
the real redirect is a redirect, and reading the same file twice gives the same set. One
exception: an announcement keeps the heading it announces for (a heading added or corrected
before its redirect is announced is still added or corrected until the redirect comes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import ClassVar, TypeVar

from tagalign.vocab.subject import Subject

C = TypeVar("C", bound="Change")


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One heading's change. ``where``: where it was read (``path: record N``), for the
    reports; not part of what the change is (the same record read twice is the same)."""

    kind: ClassVar[str] = "change"
    id: str
    where: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heading(Change):
    """A heading in its current state (a new record, or a corrected one): against a
    vocabulary it is added, relabelled or unchanged (`tagalign.vocab.changes.summary`)."""

    kind: ClassVar[str] = "heading"
    subject: Subject


@dataclass(frozen=True, slots=True, kw_only=True)
class Redirected(Change):
    """Merged into ``target`` (MARC 682 ``$0``), whose preferred name (682 ``$a``) was
    ``target_label`` when the redirect was made."""

    kind: ClassVar[str] = "redirected"
    target: str
    target_label: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Split(Change):
    """Split into several headings (``targets``, where the record names them): its evidence
    belongs to none of them alone, so it cannot be moved; a librarian decides."""

    kind: ClassVar[str] = "split"
    targets: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Deleted(Change):
    """Gone without a successor (682 ``$i Loeschung``, a SKOS concept deprecated without a
    replacement, or missing from a newer dump)."""

    kind: ClassVar[str] = "deleted"
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Announced(Change):
    """A redirect or deletion announced, not yet effective (leader/05 ``c`` and 682 ``$i
    Umlenkung`` or ``Loeschung``): ``action`` is ``"redirect"`` (to ``target``, where the
    682 names it) or ``"deletion"``; ``subject``: the heading as the record still gives it."""

    kind: ClassVar[str] = "announced"
    action: str
    target: str | None = None
    target_label: str | None = None
    subject: Subject | None = None


#: every kind of change by its name
KINDS: dict[str, type[Change]] = {c.kind: c for c in (Heading, Redirected, Split, Deleted,
                                                      Announced)}


@dataclass
class ChangeSet:
    """The changes of some change files, one per heading id (`fold` says which wins), in
    the order the ids were first read; ``sources``: the files, in the order given."""

    changes: dict[str, Change] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, changes: Iterable[Change], sources: Iterable[str] = ()) -> ChangeSet:
        out = cls(sources=list(sources))
        out.extend(changes)
        return out

    def add(self, change: Change) -> None:
        """Fold ``change`` in: it replaces the id's earlier change, except that an
        announcement without a heading of its own keeps the earlier one's."""
        earlier = self.changes.get(change.id)
        if isinstance(change, Announced) and change.subject is None:
            kept = (earlier.subject if isinstance(earlier, Heading | Announced) else None)
            change = replace(change, subject=kept)
        self.changes[change.id] = change

    def extend(self, changes: Iterable[Change]) -> None:
        for change in changes:
            self.add(change)

    def __len__(self) -> int:
        return len(self.changes)

    def __iter__(self) -> Iterator[Change]:
        return iter(self.changes.values())

    def __contains__(self, sid: object) -> bool:
        return sid in self.changes

    def get(self, sid: str) -> Change | None:
        return self.changes.get(sid)

    def of_kind(self, kind: type[C]) -> list[C]:
        """The changes of one kind, in order."""
        return [c for c in self.changes.values() if isinstance(c, kind)]

    def resolve(self, sid: str) -> str | None:
        """Where evidence for ``sid`` goes: ``sid`` itself when it is not redirected, the
        end of its chain of redirects (A → B, then B → C: C), or None when the chain ends in a
        deleted or split heading or runs in a circle."""
        seen = {sid}
        while isinstance(change := self.changes.get(sid), Redirected):
            sid = change.target
            if sid in seen:
                return None
            seen.add(sid)
        return None if isinstance(self.changes.get(sid), Deleted | Split) else sid

    def redirects(self) -> dict[str, str]:
        """Every redirected id → its final target (`resolve`), chains followed."""
        out = {}
        for change in self.of_kind(Redirected):
            target = self.resolve(change.id)
            if target is not None:
                out[change.id] = target
        return out
