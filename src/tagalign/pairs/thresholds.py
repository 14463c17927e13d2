"""Ordinal decision: three cut points on the cosine per language, fitted to maximise
Krippendorff's alpha (XL-DURel, methods.md R4).

A score below cut 1 is label 1, between cut 1 and cut 2 label 2, and so on. The fit runs
scipy's Nelder–Mead on 1 − alpha from several starts — the published one, evenly spaced
between the minimum and maximum similarity, plus evenly spaced quantiles — and keeps the
best (alpha is a step function of the cuts, so one start easily stalls on a plateau).
A language without dev data falls back to the cut points fitted on all languages pooled.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tagalign.errors import ModelFormatError
from tagalign.io import read_json, write_json_atomic
from tagalign.pairs.data import LABELS
from tagalign.pairs.metrics import krippendorff_alpha

POOLED = "*"


def apply_cuts(scores: Sequence[float], cuts: Sequence[float]) -> np.ndarray:
    """Scores → labels 1..4 (``cuts`` sorted ascending)."""
    return np.searchsorted(np.sort(np.asarray(cuts, float)), np.asarray(scores, float),
                           side="right") + 1


def even_cuts(scores: Sequence[float]) -> np.ndarray:
    """Three cut points evenly spaced between the minimum and maximum score."""
    lo, hi = float(np.min(scores)), float(np.max(scores))
    return np.linspace(lo, hi, len(LABELS) + 1)[1:-1]


def fit_cuts(scores: Sequence[float], gold: Sequence[float], restarts: int = 3) -> np.ndarray:
    """Cut points maximising ordinal alpha between ``gold`` and the cut scores."""
    from scipy.optimize import minimize

    s, g = np.asarray(scores, float), np.asarray(gold, float)

    def loss(cuts: np.ndarray) -> float:
        a = krippendorff_alpha(g, apply_cuts(s, cuts))
        return 1.0 - a if np.isfinite(a) else 2.0

    starts = [even_cuts(s)]
    starts += [np.quantile(s, np.linspace(0, 1, len(LABELS) + 1)[1:-1] * f + (1 - f) / 2)
               for f in np.linspace(1.0, 0.5, restarts)]
    best, best_loss = starts[0], loss(starts[0])
    spread = float(np.ptp(s)) or 1.0
    for x0 in starts:
        # an initial simplex as wide as a tenth of the score range: the objective is flat
        # below the gap between neighbouring scores, scipy's default 5 % of x0 may be too
        simplex = np.vstack([x0] + [x0 + 0.1 * spread * np.eye(len(x0))[i]
                                    for i in range(len(x0))])
        res = minimize(loss, x0, method="Nelder-Mead",
                       options={"initial_simplex": simplex, "xatol": 1e-4, "fatol": 1e-6,
                                "maxiter": 400})
        if res.fun < best_loss:
            best, best_loss = np.sort(res.x), float(res.fun)
    return np.sort(np.asarray(best, float))


class Thresholds:
    """Per-language cut points (``cuts_``) with a pooled fallback (key ``"*"``)."""

    def __init__(self, restarts: int = 3):
        self.restarts = restarts
        self.cuts_: dict[str, list[float]] = {}

    def fit(self, scores: Sequence[float], gold: Sequence[float], languages: Sequence[str]
            ) -> Thresholds:
        s, g, langs = np.asarray(scores, float), np.asarray(gold, float), np.asarray(languages)
        self.cuts_ = {POOLED: fit_cuts(s, g, self.restarts).tolist()}
        for lang in sorted(set(languages)):
            m = langs == lang
            if len(np.unique(g[m])) >= 2:
                self.cuts_[lang] = fit_cuts(s[m], g[m], self.restarts).tolist()
        return self

    def cuts_for(self, language: str) -> list[float]:
        return self.cuts_.get(language, self.cuts_[POOLED])

    def predict(self, scores: Sequence[float], languages: Sequence[str]) -> np.ndarray:
        if not self.cuts_:
            raise ValueError("thresholds are not fitted")
        s, langs = np.asarray(scores, float), np.asarray(languages)
        out = np.zeros(len(s), int)
        for lang in set(languages):
            m = langs == lang
            out[m] = apply_cuts(s[m], self.cuts_for(lang))
        return out

    def save(self, path: Path) -> None:
        write_json_atomic(path, {"labels": list(LABELS), "pooled_key": POOLED,
                                 "cuts": self.cuts_})

    @classmethod
    def load(cls, path: Path) -> Thresholds:
        data = read_json(path)
        if data.get("labels") != list(LABELS):
            raise ModelFormatError(f"{path}: label set {data.get('labels')} is not {list(LABELS)}")
        out = cls()
        out.cuts_ = {k: [float(x) for x in v] for k, v in data["cuts"].items()}
        if POOLED not in out.cuts_:
            raise ModelFormatError(f"{path}: no pooled cut points ({POOLED!r})")
        return out
