"""A `ChangeSet` applied to a vocabulary: the updated vocabulary, every position kept.

New headings are appended; a corrected heading keeps its position with its new labels; a
redirected, deleted or split heading keeps its position, ``retired`` (`Vocabulary.retired`:
never suggested, a redirected one's evidence counting for its target). Announcements change
nothing yet. What is already so (a heading with the labels it has, a redirect already made)
is no change, so applying the same files twice changes nothing the second time.

The updated vocabulary's ``revision`` is a digest of the one before and of the changes
made, so two projects updated alike have the same fingerprint and any other vocabulary is
refused by the project's models (`Vocabulary.check`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tagalign.vocab.changes.model import Announced, ChangeSet, Heading, Split
from tagalign.vocab.changes.summary import FIRST, ChangeSummary, summarize
from tagalign.vocab.subject import Subject
from tagalign.vocab.vocabulary import Vocabulary


@dataclass
class VocabularyUpdate:
    """What a change set does to a vocabulary (`plan_update`) and the vocabulary it makes
    (`vocabulary`). ``added``, ``relabelled``: positions in the updated vocabulary;
    ``retired``: id → (kind, target) newly retired; ``split_targets``: the headings each
    split names, where its record does; ``announced``, ``unknown``: ids, as
    `ChangeSummary` has them."""

    old: Vocabulary
    new: Vocabulary
    added: list[int] = field(default_factory=list)
    relabelled: list[int] = field(default_factory=list)
    retired: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    split_targets: dict[str, list[str]] = field(default_factory=dict)
    announced: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing to change (announcements and unknown ids change nothing)."""
        return not (self.added or self.relabelled or self.retired)

    def of_kind(self, kind: str) -> list[str]:
        return [sid for sid, (k, _) in self.retired.items() if k == kind]

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "relabelled": len(self.relabelled),
                **{kind: len(self.of_kind(kind)) for kind in ("redirected", "split",
                                                              "deleted")},
                "announced": len(self.announced), "unknown_skipped": len(self.unknown)}

    def to_dict(self, first: int = FIRST) -> dict[str, Any]:
        """The counts and the first ``first`` ids of each kind (redirects with their
        target and its label; every split, for a librarian to decide)."""
        new = self.new
        ids = new.ids
        redirects = [{"id": sid, "target": target, "target_label": new.label(target)}
                     for sid, (kind, target) in self.retired.items()
                     if kind == "redirected" and target is not None][:first]
        return {"counts": self.counts(),
                "added": [ids[p] for p in self.added[:first]],
                "relabelled": [ids[p] for p in self.relabelled[:first]],
                "redirected": redirects,
                "split": [{"id": sid, "label": new.label(sid),
                           "targets": self.split_targets.get(sid, [])}
                          for sid in self.of_kind("split")],
                "deleted": self.of_kind("deleted")[:first],
                "announced": self.announced[:first], "unknown": self.unknown[:first]}


def _final(retired: dict[str, tuple[str, str | None]], sid: str) -> str | None:
    """Where ``sid``'s evidence ends, following the redirects of ``retired``: None at a
    deleted or split heading, or in a circle."""
    seen = {sid}
    while sid in retired:
        kind, target = retired[sid]
        if kind != "redirected" or target is None or target in seen:
            return None
        seen.add(target)
        sid = target
    return sid


def plan_update(changes: ChangeSet, vocab: Vocabulary) -> VocabularyUpdate:
    """``changes`` weighed against ``vocab`` (`summarize`), without what ``vocab`` already
    says (a redirect, deletion or split already made), and the updated vocabulary."""
    summary: ChangeSummary = summarize(changes, vocab)
    headings = {c.id: c.subject for c in changes.of_kind(Heading)}
    subjects: list[Subject] = list(vocab.subjects)
    index = {s.id: i for i, s in enumerate(subjects)}
    relabelled = []
    for sid in summary.relabelled:
        subjects[index[sid]] = headings[sid]
        relabelled.append(index[sid])
    added = []
    for sid in summary.added:
        added.append(len(subjects))
        index[sid] = len(subjects)
        subjects.append(headings[sid])
    wanted: dict[str, tuple[str, str | None]] = {
        **{sid: ("redirected", target) for sid, target in summary.redirected.items()},
        **{sid: ("deleted", None) for sid in summary.redirected_outside + summary.deleted},
        **{sid: ("split", None) for sid in summary.split}}
    retired = {sid: how for sid, how in wanted.items() if vocab.retired.get(sid) != how}
    merged = {**vocab.retired, **retired}
    # chains end where their evidence can go (A → B before, B → C now: A → C)
    for sid, (kind, _target) in list(merged.items()):
        if kind == "redirected":
            end = _final(merged, sid)
            merged[sid] = ("redirected", end) if end is not None else ("deleted", None)
    retired = {sid: how for sid, how in merged.items() if vocab.retired.get(sid) != how}
    new = Vocabulary(subjects)
    new.retired = merged
    new.revision = _revision(vocab, relabelled, added, retired, subjects)
    splits = {c.id: list(c.targets) for c in changes.of_kind(Split) if c.id in retired}
    return VocabularyUpdate(vocab, new, added, relabelled, retired, splits,
                            [c.id for c in changes.of_kind(Announced) if c.id in vocab],
                            summary.unknown)


def _revision(old: Vocabulary, relabelled: list[int], added: list[int],
              retired: dict[str, tuple[str, str | None]], subjects: list[Subject]) -> str:
    """A digest of the vocabulary before (its fingerprint) and of the changes made."""
    h = hashlib.sha256(old.fingerprint.encode())
    for pos in sorted(relabelled) + added:
        s = subjects[pos]
        h.update(repr((s.id, sorted(s.labels.items()),
                       sorted((k, v) for k, v in s.alt_labels.items() if v))).encode())
    for sid in sorted(retired):
        h.update(repr((sid, retired[sid])).encode())
    return h.hexdigest()[:16]
