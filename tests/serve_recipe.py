"""A tiny deterministic recipe for the serve tests: no shared data, no model, milliseconds.

score(s) = 0.5·[a label of s occurs in the text]
         + 0.5·Σ_n jacc(q, n)·[s ∈ n.subjects] / Σ_n jacc(q, n)
over the 3 stored records n with the highest token Jaccard similarity to the query q.
Reasons name neighbours by id only, so the API must add their titles.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tagalign.recipes import Recipe, register_recipe
from tagalign.records import Record
from tagalign.suggest import Suggestion
from tagalign.vocab import Vocabulary

TOKEN = re.compile(r"\w+")


def tokens(text: str) -> set[str]:
    return {t.lower() for t in TOKEN.findall(text)}


@register_recipe
class OverlapRecipe(Recipe):
    """Label overlap plus neighbour votes; `online=False` makes `learn` unsupported."""

    name = "test-overlap"
    defaults = {"k": 3, "online": True}

    def __init__(self, vocab: Vocabulary, **params: Any):
        super().__init__(vocab, **params)
        self.records_: list[tuple[str, set[str], list[str]]] = []
        self._lock = threading.Lock()

    def fit(self, records: Sequence[Record], *, workdir: Path) -> None:
        self.records_ = [(r.id, tokens(r.text), list(r.subjects)) for r in records]

    def _suggest(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        return [self._one(r, limit) for r in records]

    def _one(self, rec: Record, limit: int) -> list[Suggestion]:
        q = tokens(rec.text)
        with self._lock:
            stored = list(self.records_)
        sims = sorted(((len(q & t) / len(q | t) if q | t else 0.0, rid, subs)
                       for rid, t, subs in stored), key=lambda x: (-x[0], x[1]))
        top = [x for x in sims[:self.params["k"]] if x[0] > 0]
        total = sum(s for s, _, _ in top) or 1.0
        scores: dict[str, float] = {}
        reasons: dict[str, dict[str, Any]] = {}
        for sim, rid, subs in top:
            for sid in subs:
                scores[sid] = scores.get(sid, 0.0) + 0.5 * sim / total
                reasons.setdefault(sid, {}).setdefault("neighbours", []).append(rid)
        for subj in self.vocab:
            hit = next((lab for lab in subj.labels.values() if tokens(lab) <= q), None)
            if hit:
                scores[subj.id] = scores.get(subj.id, 0.0) + 0.5
                reasons.setdefault(subj.id, {})["label_match"] = hit
        ranked = sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:limit]
        return [Suggestion(sid, sc, self._label(sid, rec.language), reasons[sid])
                for sid, sc in ranked]

    def learn(self, records: Sequence[Record]) -> None:
        if not self.params["online"]:
            super().learn(records)
        with self._lock:
            self.records_ = self.records_ + [(r.id, tokens(r.text), list(r.subjects))
                                             for r in records]

    def _save_state(self, path: Path) -> None:
        rows = [{"id": rid, "tokens": sorted(t), "subjects": s} for rid, t, s in self.records_]
        (path / "records.json").write_text(json.dumps(rows), encoding="utf-8")

    def _load_state(self, path: Path) -> None:
        rows = json.loads((path / "records.json").read_text(encoding="utf-8"))
        self.records_ = [(r["id"], set(r["tokens"]), r["subjects"]) for r in rows]
