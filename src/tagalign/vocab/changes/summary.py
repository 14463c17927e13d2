"""A `ChangeSet` weighed against a vocabulary (`summarize`: what it adds, relabels,
redirects, splits, deletes, announces, and which of its ids the vocabulary never had), and a
whole newer vocabulary turned into one (`diff_vocabularies`, `read_whole`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagalign.io import Reporter
from tagalign.vocab.changes.model import (
    Announced,
    ChangeSet,
    Deleted,
    Heading,
    Redirected,
    Split,
)
from tagalign.vocab.changes.read import change_format, read_changes
from tagalign.vocab.loaders import load_vocabulary
from tagalign.vocab.subject import Subject
from tagalign.vocab.vocabulary import Vocabulary

#: ids listed per kind in `ChangeSummary.to_dict`
FIRST = 5


def same_labels(a: Subject, b: Subject) -> bool:
    """Preferred and alternative labels alike (what matching and every output read)."""
    return a.labels == b.labels and {k: v for k, v in a.alt_labels.items() if v} == {
        k: v for k, v in b.alt_labels.items() if v}


@dataclass
class ChangeSummary:
    """What a change set does to one vocabulary, each kind's ids in reading order.

    ``redirected``: old id → where its evidence goes (chains followed,
    `ChangeSet.resolve`), for targets the vocabulary has or the set adds;
    ``redirected_outside``: redirects to a heading the vocabulary lacks (another entity
    type, say: the GND redirects a subject heading to a person now and then), which leave
    the old id as good as deleted; ``unknown``: ids the vocabulary never had that a
    redirect, split, deletion or announcement names (skipped)."""

    added: list[str] = field(default_factory=list)
    relabelled: list[str] = field(default_factory=list)
    unchanged: int = 0
    redirected: dict[str, str] = field(default_factory=dict)
    redirected_outside: list[str] = field(default_factory=list)
    split: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    announced: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    #: target id → its preferred label, for the redirects shown
    labels: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "relabelled": len(self.relabelled),
                "unchanged": self.unchanged, "redirected": len(self.redirected),
                "redirected_outside": len(self.redirected_outside),
                "split": len(self.split), "deleted": len(self.deleted),
                "announced": len(self.announced), "unknown_skipped": len(self.unknown)}

    @property
    def empty(self) -> bool:
        """Nothing to do: every heading as the vocabulary has it, nothing redirected,
        split, deleted or announced (what reapplying an applied file gives)."""
        counts = self.counts()
        return not any(n for kind, n in counts.items() if kind not in ("unchanged",
                                                                       "unknown_skipped"))

    def to_dict(self, first: int = FIRST) -> dict[str, Any]:
        """The counts and the first ``first`` ids of each kind (redirects with the
        target's label): what ``vocab diff --json`` prints."""
        redirects = [{"id": old, "target": new, "target_label": self.labels.get(new)}
                     for old, new in list(self.redirected.items())[:first]]
        return {"counts": self.counts(), "redirected": redirects,
                **{kind: getattr(self, kind)[:first]
                   for kind in ("added", "relabelled", "redirected_outside", "split",
                                "deleted", "announced", "unknown")}}


def summarize(changes: ChangeSet, vocab: Vocabulary) -> ChangeSummary:
    """What ``changes`` does to ``vocab``: a `Heading` the vocabulary lacks is added, one
    with other labels relabelled, else unchanged; a redirect, split, deletion or
    announcement counts for an id the vocabulary has (else it is unknown and skipped)."""
    out = ChangeSummary()
    headings = {c.id: c.subject for c in changes.of_kind(Heading)}
    for change in changes:
        if isinstance(change, Heading):
            old = vocab.get(change.id)
            if old is None:
                out.added.append(change.id)
            elif not same_labels(old, change.subject):
                out.relabelled.append(change.id)
            else:
                out.unchanged += 1
            continue
        if change.id not in vocab:
            out.unknown.append(change.id)
        elif isinstance(change, Redirected):
            target = changes.resolve(change.id)
            subject = (headings.get(target) or vocab.get(target)) if target else None
            if subject is None or target is None:
                out.redirected_outside.append(change.id)
            else:
                out.redirected[change.id] = target
                out.labels[target] = subject.label()
        elif isinstance(change, Split):
            out.split.append(change.id)
        elif isinstance(change, Deleted):
            out.deleted.append(change.id)
        elif isinstance(change, Announced):
            out.announced.append(change.id)
    return out


def diff_vocabularies(old: Vocabulary, new: Vocabulary | Iterable[Subject],
                      into: ChangeSet | None = None, where: str = "") -> ChangeSet:
    """``new`` as changes to ``old``: every heading of ``new`` (a `Heading`), and a
    `Deleted` for each id of ``old`` that ``new`` lacks, unless ``into`` (the changes
    ``new``'s own file says, e.g. its redirects) already names it."""
    out = into if into is not None else ChangeSet()
    if into is None:
        out.extend(Heading(id=s.id, subject=s, where=where) for s in new)
    seen = set(out.changes)
    out.extend(Deleted(id=sid, note="not in the newer vocabulary", where=where)
               for sid in old.ids if sid not in seen)
    return out


def read_whole(path: Path | str, old: Vocabulary, *, format: str | None = None,
               skip_bad: bool = False, report: Reporter | None = None,
               entity_types: str | None = None, option: str | None = None) -> ChangeSet:
    """A whole newer vocabulary (a dump, a thesaurus release, a saved folder …) as changes
    to ``old``: its headings, what its own records say (a MARC dump's redirects, a SKOS
    release's deprecations: `read_changes`), and every id of ``old`` it has no more as
    deleted. A format that says nothing of changes is loaded as any vocabulary is."""
    path = Path(path)
    if path.is_dir() or change_format(path, format) is None:
        new = load_vocabulary(path, format=format, report=report, entity_types=entity_types)
        return diff_vocabularies(old, new, where=str(path))
    changes = read_changes([path], format=format, skip_bad=skip_bad, report=report,
                           entity_types=entity_types, option=option)
    return diff_vocabularies(old, (), into=changes, where=str(path))
