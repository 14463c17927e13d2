"""Decisions read as the vocabulary stands now (issue 65).

A project whose vocabulary was updated by change files (`tagalign vocab update`) keeps its
feedback store as the librarians left it: a decision on a heading since redirected names
the old id, one on a heading since deleted or split names an id no catalogue takes any
more. Whoever reads the decisions for the catalogue (`tagalign.feedback.export`) or shows
them again (the review queue, `tagalign.serve.queue`) reads each subject through a
`Successor` of the project's vocabulary (`tagalign.vocab.Vocabulary.successor`): a
redirected heading's decision is its target's, a deleted or split heading's is left out
(and counted), an old id and its target both accepted are one subject. The store itself is
not rewritten: a decision stays what the librarian gave, and the next update reads it anew.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tagalign.feedback.schema import Decision, Reviewed

#: subject id → the id it stands for now (itself unless redirected), None when it is gone
#: (deleted or split): `tagalign.vocab.Vocabulary.successor`
Successor = Callable[[str], str | None]


@dataclass
class Followed:
    """What reading decisions through a `Successor` did: accepted subjects read as their
    targets (``mapped``; those merged into a target accepted too included) and accepted
    subjects left out as deleted or split (``dropped``)."""

    mapped: int = 0
    dropped: int = 0


def follow_reviewed(item: Reviewed, successor: Successor, done: Followed | None = None
                    ) -> Reviewed:
    """``item`` with each subject read as ``successor`` says (see the module): accepted
    ones in their order, a target accepted twice once (with its own origin when the
    librarian decided it too, else the first old id's), rejected ones that are neither
    gone nor accepted; ``done`` counts them. ``item`` itself when nothing changes."""
    done = done if done is not None else Followed()
    origins: dict[str, str] = {}
    for sid, origin in item.origins.items():
        now = successor(sid)
        if now is None:
            done.dropped += 1
            continue
        done.mapped += now != sid
        if now not in origins or now == sid:
            origins[now] = origin
    rejected = list(dict.fromkeys(now for sid in item.rejected
                                  if (now := successor(sid)) is not None
                                  and now not in origins))
    if list(origins.items()) == list(item.origins.items()) and rejected == list(item.rejected):
        return item
    return replace(item, record=replace(item.record, subjects=list(origins)),
                   origins=origins, rejected=rejected)


def follow_decision(item: Decision, successor: Successor) -> Decision:
    """A learn request's decision with each subject read as ``successor`` says, before it
    is stored: a redirected heading's as its target (once; a target both accepted and
    rejected is accepted, as `follow_decisions` reads them), gone ones left out (a learn
    request naming one is refused before: `tagalign.serve.service.Service.learn`).
    ``item`` itself when nothing changes."""
    def now(ids: Sequence[str]) -> list[str]:
        return list(dict.fromkeys(n for sid in ids if (n := successor(sid)) is not None))

    accepted = now(item.accepted)
    rejected = [sid for sid in now(item.rejected) if sid not in accepted]
    added = [sid for sid in now(item.added) if sid in accepted or sid in rejected]
    subjects = now(item.record.subjects)
    if (accepted, rejected, added, subjects) == (list(item.accepted), list(item.rejected),
                                                 list(item.added), list(item.record.subjects)):
        return item
    return Decision(replace(item.record, subjects=subjects), accepted, rejected, added)


def follow_decisions(decided: Mapping[str, str], successor: Successor) -> dict[str, str]:
    """Subject id → decision ("accept" | "reject", as `FeedbackStore.latest_decisions`
    gives them) read as ``successor`` says: gone subjects left out, an old id's decision
    its target's, an accept winning over a reject of the same target."""
    out: dict[str, str] = {}
    for sid, decision in decided.items():
        now = successor(sid)
        if now is not None and out.get(now) != "accept":
            out[now] = decision
    return out


__all__ = ["Followed", "Successor", "follow_decision", "follow_decisions", "follow_reviewed"]
