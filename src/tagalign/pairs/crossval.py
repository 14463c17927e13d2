"""Lemma-grouped cross-validation of a pairs setting: out-of-fold cosines, then alpha of
a cut-point mode on them (issue 35; protocol in docs/pairs.md).

1. `out_of_fold`: for each fold of `tagalign.pairs.validation.lemma_folds` a fresh
   scorer trains on the other folds' pairs (``limit_pairs`` of them, seeded) and scores
   a seeded sample of its held-out pairs (``per_language`` per language). A fold keeps its
   last epoch: its held-out lemmas must not choose its checkpoint, so the number of
   epochs is a setting the cross-validation compares, like any other. ``epochs=0`` (an
   untuned encoder) scores every sample with one model. Each fold's cosines can be cached
   as JSON, so an interrupted run resumes and the cut-point modes are compared without
   retraining.
2. `cut_point_alpha`: each fold's held-out cosines are cut with cut points fitted on the
   other folds' out-of-fold cosines, restricted when asked to as many lemmas per language
   as a real dev set holds (``fit_lemmas``, drawn ``repeats`` times): that is the
   situation of a shipped model, whose cut points come from a few dev lemmas. Alpha per
   language and mean, with a bootstrap interval over lemmas.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.io import read_json, write_json_atomic
from tagalign.pairs.data import Pair
from tagalign.pairs.params import PairsConfig
from tagalign.pairs.thresholds import Thresholds
from tagalign.pairs.validation import AlphaReport, Folds, bootstrap_alpha, sample_per_language
from tagalign.runtime import ProgressCallback


@dataclass(frozen=True)
class OutOfFold:
    """Scored held-out pairs: each row's cosine comes from the model of its ``fold``,
    which never trained on its lemma."""

    keys: list[str]
    fold: np.ndarray
    language: np.ndarray
    lemma: np.ndarray
    gold: np.ndarray
    cosine: np.ndarray
    train_s: list[float]
    score_s: list[float]

    def with_cosine(self, cosine: np.ndarray) -> OutOfFold:
        return OutOfFold(self.keys, self.fold, self.language, self.lemma, self.gold,
                         np.asarray(cosine, float), self.train_s, self.score_s)


def pair_key(pair: Pair) -> str:
    return f"{pair.language}\t{pair.use1.identifier}\t{pair.use2.identifier}"


def eval_index(pairs: Sequence[Pair], folds: Folds, per_language: int | None
               ) -> list[np.ndarray]:
    """The held-out pairs each fold's model scores (a seeded sample per language)."""
    return [sample_per_language(pairs, folds.test_index(k), per_language, folds.seed + k)
            for k in range(folds.k)]


def out_of_fold(params: dict[str, Any], pairs: Sequence[Pair], folds: Folds,
                per_language: int | None, workdir: Path, cache: Path | None = None,
                progress: ProgressCallback | None = None,
                log: Callable[[str], None] | None = None,
                only: Sequence[int] | None = None) -> OutOfFold:
    """Train one model per fold and score its held-out sample (see the module doc).
    ``only`` limits the folds run now (the rest must be cached already, or are left
    out)."""
    from tagalign.pairs.model import PairScorer, sample_pairs
    from tagalign.pairs.training import fit_model

    index = eval_index(pairs, folds, per_language)
    rows: list[tuple[int, np.ndarray, np.ndarray, float, float]] = []
    shared = None
    untuned = PairsConfig.from_params(params).epochs == 0  # one model serves every fold
    for k in range(folds.k):
        path = cache / f"fold-{k}.json" if cache else None
        keys = [pair_key(pairs[i]) for i in index[k]]
        if path and path.exists():
            saved = read_json(path)
            if saved["keys"] == keys and saved["params"] == params:
                rows.append((k, index[k], np.asarray(saved["cosine"], float),
                             float(saved["train_s"]), float(saved.get("score_s", 0.0))))
                continue
        if only is not None and k not in only:
            continue
        t0 = time.perf_counter()
        if untuned:
            shared = shared or PairScorer.build(params)
            scorer = shared
        else:
            scorer = PairScorer.build(params)
            train_pairs = [pairs[i] for i in folds.train_index(k) if pairs[i].label is not None]
            train_pairs = sample_pairs(train_pairs, scorer.config.limit_pairs,
                                       scorer.config.seed)
            if log:
                log(f"fold {k + 1}/{folds.k}: training on {len(train_pairs)} pairs")
            fit_model(scorer, train_pairs, [], Path(workdir) / f"fold-{k}", progress)
        train_s = time.perf_counter() - t0
        held = [pairs[i] for i in index[k]]
        cosine = scorer.cosine(held, progress)
        if scorer.ensemble is not None:  # standardised on the fold's own sample (no labels)
            cosine = scorer.ensemble.score(cosine, held, fit=True)
        score_s = time.perf_counter() - t0 - train_s
        if log:
            log(f"fold {k + 1}/{folds.k}: {train_s:.0f} s training, {score_s:.0f} s "
                f"scoring {len(cosine)} pairs")
        if path:
            write_json_atomic(path, {"params": params, "fold": k, "keys": keys,
                                     "cosine": cosine.tolist(), "train_s": train_s,
                                     "score_s": score_s})
        rows.append((k, index[k], cosine, train_s, score_s))
    idx = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, int)
    return OutOfFold(
        keys=[pair_key(pairs[i]) for i in idx],
        fold=np.concatenate([np.full(len(r[1]), r[0]) for r in rows]) if rows else idx,
        language=np.array([pairs[i].language for i in idx]),
        lemma=np.array([pairs[i].lemma for i in idx]),
        gold=np.array([pairs[i].label for i in idx], float),
        cosine=np.concatenate([r[2] for r in rows]) if rows else np.zeros(0),
        train_s=[r[3] for r in rows], score_s=[r[4] for r in rows])


def dev_lemma_counts(pairs: Sequence[Pair]) -> dict[str, int]:
    """Distinct lemmas per language of labelled ``pairs`` (a dev set's size in words)."""
    seen: dict[str, set[str]] = {}
    for p in pairs:
        if p.label is not None:
            seen.setdefault(p.language, set()).add(p.lemma)
    return {k: len(v) for k, v in sorted(seen.items())}


def _fit_rows(oof: OutOfFold, k: int, fit_lemmas: dict[str, int] | None,
              rng: np.random.Generator) -> np.ndarray:
    rows = np.flatnonzero(oof.fold != k)
    if fit_lemmas is None:
        return rows
    keep = []
    for language in sorted(set(oof.language[rows].tolist())):
        mine = rows[oof.language[rows] == language]
        names = sorted(set(oof.lemma[mine].tolist()))
        want = fit_lemmas.get(language, len(names))
        chosen = set(rng.choice(names, min(want, len(names)), replace=False).tolist())
        keep.append(mine[np.isin(oof.lemma[mine], list(chosen))])
    return np.sort(np.concatenate(keep)) if keep else rows


def cut_point_predictions(oof: OutOfFold, mode: str = "language", shrink: float = 8.0,
                          fit_lemmas: dict[str, int] | None = None, repeats: int = 1,
                          seed: int = 0) -> list[np.ndarray]:
    """Labels of every out-of-fold row, cut with points fitted on the other folds' rows
    (all of them, or ``fit_lemmas`` lemmas per language drawn ``repeats`` times)."""
    rng = np.random.default_rng(seed)
    preds = []
    for _ in range(repeats if fit_lemmas is not None else 1):
        pred = np.zeros(len(oof.gold), int)
        for k in sorted(set(oof.fold.tolist())):
            fit, test = _fit_rows(oof, k, fit_lemmas, rng), np.flatnonzero(oof.fold == k)
            cuts = Thresholds(mode=mode, shrink=shrink).fit(
                oof.cosine[fit], oof.gold[fit], oof.language[fit], oof.lemma[fit])
            pred[test] = cuts.predict(oof.cosine[test], oof.language[test])
        preds.append(pred)
    return preds


def cut_point_alpha(oof: OutOfFold, mode: str = "language", shrink: float = 8.0,
                    fit_lemmas: dict[str, int] | None = None, repeats: int = 3,
                    seed: int = 0, n_boot: int = 1000) -> AlphaReport:
    """Alpha per language and mean (± bootstrap interval over lemmas) of ``mode``'s cut
    points on the out-of-fold cosines."""
    preds = cut_point_predictions(oof, mode, shrink, fit_lemmas, repeats, seed)
    return bootstrap_alpha(oof.gold, preds, oof.language, oof.lemma, n_boot, seed)


def lemma_cv(config: PairsConfig, pairs: Sequence[Pair], dev: Sequence[Pair], k: int,
             per_language: int | None, workdir: Path, seed: int = 0, repeats: int = 3,
             n_boot: int = 1000, progress: ProgressCallback | None = None,
             log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The cross-validated alpha of a setting (`tagalign pairs train --cv K`): folds by
    lemma over ``pairs`` (train + dev), out-of-fold cosines, cut points of the setting's
    ``cut_mode`` fitted on dev-sized lemma sets of the other folds (``config``: the
    setting, a trained scorer's). A JSON-ready summary."""
    from tagalign.pairs.validation import lemma_folds

    labelled = [x for x in pairs if x.label is not None]
    folds = lemma_folds(labelled, k, seed)
    t0 = time.perf_counter()
    oof = out_of_fold(config.to_params(), labelled, folds, per_language, workdir,
                      progress=progress, log=log)
    report = cut_point_alpha(oof, config.cut_mode, float(config.cut_shrink),
                             dev_lemma_counts(dev), repeats, seed, n_boot)
    return {"folds": k, "seed": seed, "cut_mode": config.cut_mode,
            "scored_per_language_and_fold": per_language, "thin_languages": folds.thin,
            "train_minutes": sum(oof.train_s) / 60,
            "minutes": (time.perf_counter() - t0) / 60, **report.as_dict()}
