"""`Suggestion`: one ranked subject for one record, with the evidence behind it."""

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
