"""Ordinal decision: three cut points on the cosine per language, fitted to maximise
Krippendorff's alpha (XL-DURel, methods.md R4).

A score below cut 1 is label 1, between cut 1 and cut 2 label 2, and so on. The fit runs
scipy's Nelder–Mead on 1 − alpha from several starts — the published one, evenly spaced
between the minimum and maximum similarity, plus evenly spaced quantiles — and keeps the
best (alpha is a step function of the cuts, so one start easily stalls on a plateau).
A language without dev data falls back to the cut points fitted on all languages pooled.

How the cut points of a language are chosen is the ``mode`` (issue 35: a dev set holds
4–28 lemmas per language, too few for three free cut points each):

* ``language`` — each language its own cut points (the published way);
* ``pooled`` — one set fitted on all languages together;
* ``shrunk`` — each language's cut points pulled towards the pooled ones, with weight
  L / (L + ``shrink``) on its own, L its number of distinct lemmas in the fit data (a
  language of ``shrink`` lemmas sits half way);
* ``normalised`` — every language's cosines standardised by their own mean and standard
  deviation on the fit data (no labels needed for those two numbers), one pooled set of
  cut points on the standardised scores.

Which one holds on unseen words is measured by lemma-grouped cross-validation
(`tagalign.pairs.crossval`, docs/pairs.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tagalign.errors import InputError, ModelFormatError
from tagalign.io import read_json, write_json_atomic
from tagalign.pairs.data import LABELS
from tagalign.pairs.metrics import Floats, Strings, krippendorff_alpha
from tagalign.pairs.params import CUT_MODES

POOLED = "*"


def apply_cuts(scores: Floats, cuts: Floats) -> np.ndarray:
    """Scores → labels 1..4 (``cuts`` sorted ascending)."""
    return np.searchsorted(np.sort(np.asarray(cuts, float)), np.asarray(scores, float),
                           side="right") + 1


def even_cuts(scores: Floats) -> np.ndarray:
    """Three cut points evenly spaced between the minimum and maximum score."""
    lo, hi = float(np.min(scores)), float(np.max(scores))
    return np.linspace(lo, hi, len(LABELS) + 1)[1:-1]


def fit_cuts(scores: Floats, gold: Floats, restarts: int = 3) -> np.ndarray:
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
    """Cut points per language (``cuts_``) with a pooled fallback (key ``"*"``), fitted in
    one of `CUT_MODES`; ``stats_`` holds the (mean, std) per language of ``normalised``."""

    def __init__(self, restarts: int = 3, mode: str = "language", shrink: float = 8.0):
        if mode not in CUT_MODES:
            raise InputError(f"cut-point mode must be one of {CUT_MODES}, got {mode!r}")
        if shrink < 0:
            raise InputError(f"cut-point shrinkage must be >= 0, got {shrink}")
        self.restarts = restarts
        self.mode = mode
        self.shrink = float(shrink)
        self.cuts_: dict[str, list[float]] = {}
        self.stats_: dict[str, list[float]] = {}

    def fit(self, scores: Floats, gold: Floats, languages: Strings,
            lemmas: Strings | None = None) -> Thresholds:
        """Fit on labelled scores; ``lemmas`` (one per score) is needed by ``shrunk``."""
        s, g, langs = np.asarray(scores, float), np.asarray(gold, float), np.asarray(languages)
        self.cuts_, self.stats_ = {}, {}
        if self.mode == "normalised":
            for lang in [POOLED, *sorted(set(langs.tolist()))]:
                m = np.ones(len(s), bool) if lang == POOLED else langs == lang
                self.stats_[lang] = [float(s[m].mean()), float(s[m].std()) or 1.0]
            s = self._standardise(s, langs)
        self.cuts_[POOLED] = fit_cuts(s, g, self.restarts).tolist()
        if self.mode in ("pooled", "normalised"):
            return self
        if self.mode == "shrunk" and lemmas is None:
            raise InputError("shrunk cut points need the lemma of each pair")
        lems = np.asarray(lemmas) if lemmas is not None else None
        pooled = np.asarray(self.cuts_[POOLED])
        for lang in sorted(set(langs.tolist())):
            m = langs == lang
            if len(np.unique(g[m])) < 2:
                continue
            own = fit_cuts(s[m], g[m], self.restarts)
            if self.mode == "shrunk" and lems is not None:
                n = len(set(lems[m].tolist()))
                w = n / (n + self.shrink) if n + self.shrink > 0 else 1.0
                own = np.sort(w * own + (1 - w) * pooled)
            self.cuts_[lang] = own.tolist()
        return self

    def _standardise(self, scores: np.ndarray, langs: np.ndarray) -> np.ndarray:
        out = np.empty(len(scores))
        for lang in set(langs.tolist()):
            m = langs == lang
            mean, std = self.stats_.get(lang, self.stats_[POOLED])
            out[m] = (scores[m] - mean) / std
        return out

    def cuts_for(self, language: str) -> list[float]:
        return self.cuts_.get(language, self.cuts_[POOLED])

    def predict(self, scores: Floats, languages: Strings) -> np.ndarray:
        if not self.cuts_:
            raise ValueError("thresholds are not fitted")
        s, langs = np.asarray(scores, float), np.asarray(languages)
        if self.stats_:
            s = self._standardise(s, langs)
        out = np.zeros(len(s), int)
        for lang in set(langs.tolist()):
            m = langs == lang
            out[m] = apply_cuts(s[m], self.cuts_for(lang))
        return out

    def save(self, path: Path) -> None:
        data: dict = {"labels": list(LABELS), "pooled_key": POOLED, "mode": self.mode,
                      "cuts": self.cuts_}
        if self.mode == "shrunk":
            data["shrink"] = self.shrink
        if self.stats_:
            data["stats"] = self.stats_
        write_json_atomic(path, data)

    @classmethod
    def load(cls, path: Path) -> Thresholds:
        """A saved file; one written before modes existed is ``language`` mode."""
        data = read_json(path)
        if data.get("labels") != list(LABELS):
            raise ModelFormatError(f"{path}: label set {data.get('labels')} is not {list(LABELS)}")
        mode = data.get("mode", "language")
        if mode not in CUT_MODES:
            raise ModelFormatError(f"{path}: cut-point mode {mode!r} is not one of {CUT_MODES}")
        out = cls(mode=mode, shrink=float(data.get("shrink", 8.0)))
        out.cuts_ = {k: [float(x) for x in v] for k, v in data["cuts"].items()}
        out.stats_ = {k: [float(x) for x in v] for k, v in data.get("stats", {}).items()}
        if POOLED not in out.cuts_:
            raise ModelFormatError(f"{path}: no pooled cut points ({POOLED!r})")
        if mode == "normalised" and POOLED not in out.stats_:
            raise ModelFormatError(f"{path}: normalised cut points without pooled statistics")
        return out
