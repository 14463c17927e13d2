"""`Suggestion`: one ranked subject for one record, with the evidence behind it; `Quality`:
how far a record's suggestions can be trusted; `Tagged`: one record's whole answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Suggestion:
    id: str
    score: float
    label: str = ""
    reasons: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "label": self.label,
                               "score": round(float(self.score), 6)}
        if self.reasons:
            out["reasons"] = self.reasons
        return out


@dataclass(frozen=True, slots=True)
class Quality:
    """Estimated quality of one record's returned suggestions (both in [0, 1]): ``recall``
    = expected share of its gold subjects in the list, ``precision`` = expected share of
    the list that is gold. Made by the recipe's estimator (`tagalign.suggest.quality`)."""

    recall: float
    precision: float

    def to_json(self) -> dict[str, float]:
        return {"recall": round(float(self.recall), 4),
                "precision": round(float(self.precision), 4)}


@dataclass(slots=True)
class Tagged:
    """One record's answer to a `SuggestRequest`: its suggestions, a warning (empty or cut
    text), the quality estimate (None when not asked for, when the recipe has no estimator
    or the record had no text), its domains with scores, best first (None when not asked
    for), its top ``depth`` suggestions uncut by threshold or exclusions (``ranking``; None
    when not asked for) and its neighbour records by source (None when not asked for)."""

    suggestions: list[Suggestion]
    warning: str | None = None
    quality: Quality | None = None
    domains: list[tuple[str, float]] | None = None
    ranking: list[Suggestion] | None = None
    neighbours: Neighbours | None = None


#: a record's neighbour records by source name: (record id, similarity), nearest first
#: (`Source.record_neighbours`; what a domain model reads beside the suggestions)
Neighbours = dict[str, list[tuple[str, float]]]


def keep_above(row: list[Suggestion], threshold: float) -> list[Suggestion]:
    """The suggestions scoring at least ``threshold`` (all of them for 0)."""
    return [s for s in row if s.score >= threshold] if threshold > 0 else row
