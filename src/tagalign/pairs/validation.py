"""Lemma-grouped validation for ordinal pair scoring (issue 35): folds that never put one
lemma on both sides, and a bootstrap over lemmas for the alpha they give.

CoMeDi's dev holds 4–28 lemmas per language, so a figure fitted and scored on it says
little about a new word. Here every language's lemmas are dealt to ``k`` folds (a seeded
shuffle, each next lemma to the fold with the fewest pairs of that language so far): a
fold's model never trains on a lemma it is scored on, and every pair lands in exactly one
test fold. A language with fewer lemmas than folds appears in fewer test folds (reported
in `Folds.thin`, never an error: its pairs are still each in one test fold).

The interval resamples lemmas, not pairs, within each language: pairs of one lemma share
its sense inventory and its annotators, so a pair bootstrap would be far too narrow.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tagalign.errors import InputError
from tagalign.pairs.data import Pair
from tagalign.pairs.metrics import Floats, Strings, krippendorff_alpha


@dataclass(frozen=True)
class Folds:
    """``fold[i]`` is the test fold of ``pairs[i]``; ``thin`` names each language with fewer
    lemmas than folds and its lemma count."""

    k: int
    seed: int
    fold: np.ndarray
    thin: dict[str, int] = field(default_factory=dict)

    def train_index(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.fold != k)

    def test_index(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.fold == k)


def group_key(pair: Pair) -> tuple[str, str]:
    """The grouping unit: a lemma within its language (two languages may share a
    spelling, e.g. German and Norwegian, without being the same word)."""
    return (pair.language, pair.lemma)


def lemma_folds(pairs: Sequence[Pair], k: int, seed: int = 0) -> Folds:
    """Fold of each pair, grouped by (language, lemma); seeded, balanced by pair count
    within each language."""
    if k < 2:
        raise InputError(f"lemma-grouped cross-validation needs at least 2 folds, got {k}")
    size: dict[tuple[str, str], int] = defaultdict(int)
    for p in pairs:
        size[group_key(p)] += 1
    by_language: dict[str, list[str]] = defaultdict(list)
    for language, lemma in sorted(size):
        by_language[language].append(lemma)
    if len(size) < k:
        raise InputError(f"{k} folds need at least {k} lemmas; the pairs hold {len(size)}")
    rng = np.random.default_rng(seed)
    fold_of: dict[tuple[str, str], int] = {}
    thin: dict[str, int] = {}
    for language, lemmas in sorted(by_language.items()):
        if len(lemmas) < k:
            thin[language] = len(lemmas)
        load = np.zeros(k, int)
        # fold offsets rotate by language so thin languages do not all fill fold 0
        offset = int(rng.integers(k))
        for i in rng.permutation(len(lemmas)):
            key = (language, lemmas[i])
            target = int(np.argmin(np.roll(load, -offset))) + offset
            target %= k
            fold_of[key] = target
            load[target] += size[key]
    fold = np.array([fold_of[group_key(p)] for p in pairs], int)
    return Folds(k, seed, fold, thin)


def sample_per_language(pairs: Sequence[Pair], index: np.ndarray, per_language: int | None,
                        seed: int) -> np.ndarray:
    """At most ``per_language`` of ``index`` for each language (seeded, sorted): the pairs a
    fold's model scores when scoring all of them would cost too much CPU."""
    if per_language is None:
        return np.sort(index)
    rng = np.random.default_rng(seed)
    langs = np.array([pairs[i].language for i in index])
    keep = []
    for language in sorted(set(langs)):
        mine = index[langs == language]
        take = min(len(mine), per_language)
        keep.append(rng.choice(mine, take, replace=False))
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, int)


@dataclass(frozen=True)
class AlphaReport:
    """Alpha per language and their unweighted mean (averaged over prediction repeats),
    each with a percentile interval from resampling lemmas within languages."""

    alpha: dict[str, float]
    mean_alpha: float
    interval: dict[str, tuple[float, float]]
    mean_interval: tuple[float, float]
    lemmas: dict[str, int]
    pairs: dict[str, int]
    level: float

    def as_dict(self) -> dict:
        return {"mean_alpha": self.mean_alpha, "mean_interval": list(self.mean_interval),
                "alpha": self.alpha, "interval": {k: list(v) for k, v in self.interval.items()},
                "lemmas": self.lemmas, "pairs": self.pairs, "level": self.level}


def _alpha_of(gold: np.ndarray, preds: Sequence[np.ndarray], idx: np.ndarray) -> float:
    values = [krippendorff_alpha(gold[idx], p[idx]) for p in preds]
    return float(np.nanmean(values)) if not all(np.isnan(values)) else float("nan")


def _lemma_groups(languages: Strings, lemmas: Strings
                  ) -> dict[str, list[np.ndarray]]:
    """Per language (sorted), the row indices of each of its lemmas (sorted)."""
    langs, lems = np.asarray(languages), np.asarray(lemmas)
    groups = {}
    for language in sorted(set(langs.tolist())):
        m = np.flatnonzero(langs == language)
        groups[language] = [m[lems[m] == name] for name in sorted(set(lems[m].tolist()))]
    return groups


def _draws(gold: np.ndarray, preds: Sequence[np.ndarray], groups: dict[str, list[np.ndarray]],
           n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, languages) alpha of each bootstrap draw: every language's lemmas resampled
    with replacement, all pairs of a drawn lemma along. The draws depend only on the
    groups and the seed, so two predictions of the same rows get the same draws."""
    rng = np.random.default_rng(seed)
    draws = np.full((n_boot, len(groups)), np.nan)
    for b in range(n_boot):
        for j, members in enumerate(groups.values()):
            pick = rng.integers(len(members), size=len(members))
            draws[b, j] = _alpha_of(gold, preds, np.concatenate([members[i] for i in pick]))
    return draws


def paired_difference(gold: Floats, preds_a: Sequence[Floats],
                      preds_b: Sequence[Floats], languages: Strings,
                      lemmas: Strings, n_boot: int = 1000, seed: int = 0,
                      level: float = 0.95) -> dict[str, float]:
    """Mean alpha of ``preds_b`` minus that of ``preds_a`` on the same pairs (e.g. two
    cut-point modes of one model's cosines), with a percentile interval over the *same*
    lemma draws for both — far narrower than comparing two separate intervals, since
    what both share (which lemmas are hard) cancels — and the share of draws in which b
    is ahead. ``diff``, ``lo``, ``hi``, ``share_b_ahead``."""
    g = np.asarray(gold, float)
    groups = _lemma_groups(languages, lemmas)
    pa = [np.asarray(p, float) for p in preds_a]
    pb = [np.asarray(p, float) for p in preds_b]
    da, db = (np.nanmean(_draws(g, p, groups, n_boot, seed), axis=1) for p in (pa, pb))
    delta = (db - da)[np.isfinite(db - da)]
    whole = [np.nanmean([_alpha_of(g, p, np.concatenate(m)) for m in groups.values()])
             for p in (pa, pb)]
    lo, hi = np.percentile(delta, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return {"diff": float(whole[1] - whole[0]), "lo": float(lo), "hi": float(hi),
            "share_b_ahead": float(np.mean(delta > 0))}


def bootstrap_alpha(gold: Floats, preds: Sequence[Floats],
                    languages: Strings, lemmas: Strings, n_boot: int = 1000,
                    seed: int = 0, level: float = 0.95) -> AlphaReport:
    """Alpha per language (the mean over the prediction arrays in ``preds``, e.g. repeats
    of a cut-point fit) and the mean over languages, with a percentile interval: each
    draw resamples every language's lemmas with replacement (all pairs of a drawn lemma
    come along) and recomputes the languages and their mean."""
    g = np.asarray(gold, float)
    ps = [np.asarray(p, float) for p in preds]
    groups = _lemma_groups(languages, lemmas)
    alpha, interval, n_lemmas, n_pairs = {}, {}, {}, {}
    for language, members in groups.items():
        m = np.concatenate(members)
        alpha[language] = _alpha_of(g, ps, m)
        n_lemmas[language], n_pairs[language] = len(members), len(m)
    draws = _draws(g, ps, groups, n_boot, seed)
    lo, hi = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    for j, language in enumerate(groups):
        col = draws[:, j][np.isfinite(draws[:, j])]
        interval[language] = ((float(np.percentile(col, lo)), float(np.percentile(col, hi)))
                              if len(col) else (float("nan"), float("nan")))
    means = np.nanmean(draws, axis=1) if len(groups) else np.zeros(0)
    means = means[np.isfinite(means)]
    values = [v for v in alpha.values() if np.isfinite(v)]
    return AlphaReport(alpha, float(np.mean(values)) if values else float("nan"), interval,
                       (float(np.percentile(means, lo)), float(np.percentile(means, hi)))
                       if len(means) else (float("nan"), float("nan")),
                       n_lemmas, n_pairs, level)
