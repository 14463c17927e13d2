"""Per-record quality estimation: how much of a record's returned list is right.

Libraries release machine subjects only for records whose indexing is likely good; ZBW
estimates that with a separate tool, qualle (Toepfer & Kasprzik, "Quality estimation for
automatic subject indexing"). Here the estimate comes from what the hybrid pipeline already
knows about each record, so it costs one small LightGBM model per target at suggest time.

For one record and its returned list R (the top ``limit`` candidates scoring at least
``threshold``) with gold set G, the targets are

* recall    = |G ∩ R| / |G|
* precision = |G ∩ R| / |R|          (0 when nothing is returned)

and the features (`PROFILE_FEATURES`, the record's columns, the request's):

* score profile: ranker scores at ranks 1, 2, 3, 5 and ``limit``; the sum of the top 5;
  the number, sum and mean of the returned scores; the sum over all candidates (the ranker
  is calibrated, so it is the expected number of gold subjects among them) and the share
  of it the list holds; how many candidates there are, and how many score ≥ 0.5, ≥ 0.2;
* agreement: how many sources stand behind the top 5 (mean), share of them with ≥ 2;
* neighbours: similarity of the nearest training record, per neighbour source;
* seen vs rare: log frequency of the top 5 subjects among training records (mean, min);
* the record: tokens, language (``is_en``), type; the request: ``limit``, ``threshold``.

One estimator serves every ``limit`` and ``threshold``: training rows are the held-out
records under each combination of `LIMITS` × `THRESHOLDS`. Both regressors use LightGBM's
cross-entropy objective (labels in [0, 1]), so estimates are in [0, 1]; saved in
LightGBM's text format plus JSON, never pickle.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import lightgbm as lgb
import numpy as np

from tagalign.io import load_npy, read_json, save_npy_atomic, write_bytes_atomic, write_json_atomic
from tagalign.params import NonNegative, PartConfig, Positive
from tagalign.runtime import ProgressCallback
from tagalign.suggest.fusion import NO_CORRECTION, Weights, as_weights, blend, boost
from tagalign.suggest.sources.base import ranks_of
from tagalign.suggest.suggestion import Quality

LIMITS = (1, 3, 5, 10, 20)
THRESHOLDS = (0.0, 0.1, 0.3, 0.5)
RECORD_COLUMNS = ("n_tokens", "is_en", "rec_type")  # constant within a record
#: the score profile, agreement and subject-frequency columns (`CandidateProfile.features`)
PROFILE_FEATURES = ["s1", "s2", "s3", "s5", "s_limit", "sum5", "n_returned", "sum_returned",
                    "mean_returned", "sum_all", "share_returned", "n_candidates",
                    "n_above_0.5", "n_above_0.2", "agree5", "multi5", "prior5_mean",
                    "prior5_min"]
LGB_PARAMS = {
    "objective": "cross_entropy",
    "learning_rate": 0.05,
    "num_leaves": 15,
    "min_data_in_leaf": 300,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "verbose": -1,
    "seed": 13,
    "deterministic": True,
}


@dataclass
class CandidateProfile:
    """A batch's candidates as (records × rank) grids, best first; ``idx`` maps each cell
    to its candidate (-1: none), so per-candidate values line up with the scores."""

    scores: np.ndarray
    support: np.ndarray
    prior: np.ndarray
    idx: np.ndarray
    #: per record: `RECORD_COLUMNS` then each ``*_top1`` column (NaN without candidates)
    record: np.ndarray
    record_names: list[str]

    @classmethod
    def build(cls, rows: np.ndarray, scores: np.ndarray, X: np.ndarray, names: list[str],
              support: np.ndarray, n_records: int) -> CandidateProfile:
        order = np.lexsort((-scores, rows))
        srows = rows[order]
        rank = ranks_of(srows).astype(np.int64) - 1
        width = max(5, int(rank.max()) + 1 if len(rank) else 1)
        idx = np.full((n_records, width), -1, np.int64)
        idx[srows, rank] = order
        valid = idx >= 0
        n_support = support.sum(1).astype(np.float32) if support.size else np.zeros(len(rows))

        def grid(values: np.ndarray, fill: float) -> np.ndarray:
            return np.where(valid, values[idx] if len(values) else fill, fill)

        col = {n: i for i, n in enumerate(names)}
        prior = grid(X[:, col["prior"]], np.nan) if "prior" in col else np.full(idx.shape,
                                                                                np.nan)
        record_names = [*RECORD_COLUMNS, *sorted(n for n in names if n.endswith("_top1"))]
        record = np.full((n_records, len(record_names)), np.nan, np.float32)
        with warnings.catch_warnings():  # a record without candidates: all-NaN, kept NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            for j, name in enumerate(record_names):
                if name in col:
                    record[:, j] = np.nanmax(grid(X[:, col[name]], np.nan), axis=1)
        return cls(grid(scores, 0.0), grid(n_support, 0.0), prior, idx, record,
                   record_names)

    def __len__(self) -> int:
        return len(self.idx)

    def returned(self, limit: int, threshold: float) -> np.ndarray:
        """(records × rank) mask of the list a request returns."""
        ranks = np.arange(self.idx.shape[1])[None, :]
        return (self.idx >= 0) & (ranks < limit) & (self.scores >= threshold)

    def features(self, limit: int, threshold: float) -> np.ndarray:
        """(records × `feature_names`) matrix for the list a request returns."""
        S, valid, ret = self.scores, self.idx >= 0, self.returned(limit, threshold)
        n_ret = ret.sum(1)
        sum_ret = (S * ret).sum(1)
        sum_all = S.sum(1)
        top5 = valid[:, :5]
        n5 = np.maximum(top5.sum(1), 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            prior5 = np.where(top5, self.prior[:, :5], np.nan)
            prior_mean, prior_min = np.nanmean(prior5, 1), np.nanmin(prior5, 1)
        cols = {
            "s1": S[:, 0], "s2": S[:, 1], "s3": S[:, 2], "s5": S[:, 4],
            "s_limit": S[:, min(limit, S.shape[1]) - 1], "sum5": S[:, :5].sum(1),
            "n_returned": n_ret, "sum_returned": sum_ret,
            "mean_returned": sum_ret / np.maximum(n_ret, 1), "sum_all": sum_all,
            "share_returned": sum_ret / np.maximum(sum_all, 1e-9),
            "n_candidates": valid.sum(1), "n_above_0.5": (S >= 0.5).sum(1),
            "n_above_0.2": (S >= 0.2).sum(1),
            "agree5": (self.support[:, :5] * top5).sum(1) / n5,
            "multi5": ((self.support[:, :5] >= 2) & top5).sum(1) / n5,
            "prior5_mean": prior_mean, "prior5_min": prior_min,
        }
        n = len(self)
        return np.column_stack([*cols.values(), self.record, np.full(n, limit),
                                np.full(n, threshold)]).astype(np.float32)

    def feature_names(self) -> list[str]:
        return [*PROFILE_FEATURES, *self.record_names, "limit", "threshold"]

    def targets(self, gold: np.ndarray, n_gold: np.ndarray, limit: int, threshold: float
                ) -> tuple[np.ndarray, np.ndarray]:
        """True (recall, precision) per record; ``gold``: 0/1 per candidate, ``n_gold``:
        gold subjects per record (those never proposed count as missed)."""
        ret = self.returned(limit, threshold)
        hits = (np.where(self.idx >= 0, gold[self.idx] if len(gold) else 0, 0) * ret).sum(1)
        return hits / np.maximum(n_gold, 1), hits / np.maximum(ret.sum(1), 1)


@dataclass
class QualityData:
    """What the estimator learns from, kept so that it can learn again when the score
    corrections change after training (`tagalign hyperopt --save` sets `blend`'s weights;
    an estimator of other scores than those served would be wrong: issue 30).

    Grids as in `CandidateProfile`, ordered by the *raw* (out-of-fold) ranker score:
    ``raw`` scores, ``prior`` and ``support`` per cell, ``gold`` 0/1, ``valid``; per record
    its `CandidateProfile.record` columns and ``n_gold``."""

    raw: np.ndarray
    prior: np.ndarray
    support: np.ndarray
    gold: np.ndarray
    valid: np.ndarray
    record: np.ndarray
    record_names: list[str]
    n_gold: np.ndarray

    ARRAYS = ("raw", "prior", "support", "gold", "valid", "record", "n_gold")

    @classmethod
    def build(cls, rows: np.ndarray, raw: np.ndarray, X: np.ndarray, names: list[str],
              support: np.ndarray, gold: np.ndarray, n_gold: np.ndarray) -> QualityData:
        """From a candidate table (``raw``: out-of-fold ranker scores, ``gold`` 0/1)."""
        p = CandidateProfile.build(rows, raw, X, names, support, len(n_gold))
        valid = p.idx >= 0
        cell_gold = np.where(valid, gold[p.idx] if len(gold) else 0, 0).astype(np.uint8)
        return cls(p.scores.astype(np.float32), p.prior.astype(np.float32),
                   p.support.astype(np.float32), cell_gold, valid, p.record, p.record_names,
                   np.asarray(n_gold, np.int32))

    def profile(self, weights: Weights) -> tuple[CandidateProfile, np.ndarray, np.ndarray]:
        """(profile, gold per candidate, n_gold) with the scores served under ``weights``:
        `blend` of the raw scores, each record's cells ordered by them again (ties keep the
        raw order, as `CandidateProfile.build` keeps the candidates')."""
        prior = np.nan_to_num(self.prior)
        # an unseen subject's prior: the table's lowest (the label-reading sources propose
        # unseen subjects for nearly every record, and the simulated tail's withheld ones
        # have it too)
        floor = float(prior[self.valid].min()) if self.valid.any() else None
        scores = np.where(self.valid, blend(self.raw, prior, self.support, *weights,
                                            unseen_prior=floor), 0.0)
        order = np.argsort(np.where(self.valid, -scores, np.inf), axis=1, kind="stable")

        def take(grid: np.ndarray) -> np.ndarray:
            return np.take_along_axis(grid, order, 1)

        valid = take(self.valid)
        idx = np.where(valid, np.arange(valid.size).reshape(valid.shape), -1)
        profile = CandidateProfile(take(scores).astype(np.float32), take(self.support),
                                   take(self.prior), idx, self.record, self.record_names)
        return profile, take(self.gold).ravel(), self.n_gold

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        for name in self.ARRAYS:
            save_npy_atomic(path / f"{name}.npy", getattr(self, name))
        write_json_atomic(path / "data.json", {"record_names": self.record_names})

    @classmethod
    def load(cls, path: Path) -> QualityData:
        arrays = {name: load_npy(path / f"{name}.npy", mmap=True) for name in cls.ARRAYS}
        return cls(**arrays, record_names=read_json(path / "data.json")["record_names"])


def cross_fitted_scores(rows: np.ndarray, folds: int, seed: int,
                        fit_predict: Callable[[np.ndarray, np.ndarray, int], np.ndarray]
                        ) -> np.ndarray:
    """Out-of-fold ranker scores: records are split into ``folds`` folds (seeded), and each
    fold's candidates are scored by ``fit_predict(train_mask, test_mask, k)`` — a ranker
    fitted on the other folds only (``k``: the fold's number, from 0). So every score is
    one the ranker gives a record it never saw, as at suggest time, and an estimator
    fitted on them learns honest errors."""
    uniq = np.unique(rows)
    fold_of = dict(zip(uniq.tolist(), np.random.default_rng(seed).permutation(len(uniq))
                       % folds, strict=True))
    fold = np.array([fold_of[r] for r in rows.tolist()], np.int64)
    scores = np.zeros(len(rows), np.float64)
    for k in range(folds):
        test = fold == k
        scores[test] = fit_predict(~test, test, k)
    return scores


@dataclass(frozen=True)
class QualityConfig(PartConfig):
    """The quality estimate's settings: its regressors' boosting rounds (at most
    ``num_rounds``, stopping after ``early_stopping`` without gain) and ``seed``; ``folds``:
    how many folds of the held-out records cross-fit the ranker scores it learns from
    (`cross_fitted_scores`, the trainer's)."""

    num_rounds: Positive = 400
    early_stopping: Positive = 30
    seed: NonNegative = 13
    folds: int = 3

    kind: ClassVar[str] = "quality config"


class QualityEstimator:
    """Two LightGBM regressors (recall, precision) over `CandidateProfile.features`;
    ``config`` (or its fields as keywords), ``num_threads``: the runtime's."""

    def __init__(self, config: QualityConfig | None = None, num_threads: int = 0,
                 **settings: Any):
        if config is not None and settings:
            raise TypeError("QualityEstimator: a config or its settings, not both")
        self.config = config if config is not None else QualityConfig(**settings)
        self.num_threads = num_threads
        self.feature_names_: list[str] = []
        self.boosters_: dict[str, lgb.Booster] = {}
        #: the score corrections of the scores it learned from (models saved before the
        #: key learned the ranker's own scores: no correction)
        self.weights_: Weights = NO_CORRECTION
        #: what it learned from (`refit` learns again from it); None: saved without
        self.data_: QualityData | None = None

    def fit_data(self, data: QualityData, weights: Weights,
                 progress: ProgressCallback | None = None) -> QualityEstimator:
        """Learn from ``data`` with the scores served under ``weights``; keeps the data.
        ``progress``: as `fit`'s."""
        self.fit(*data.profile(weights), progress=progress)
        self.weights_, self.data_ = as_weights(weights), data
        return self

    def fit(self, profile: CandidateProfile, gold: np.ndarray, n_gold: np.ndarray,
            progress: ProgressCallback | None = None) -> QualityEstimator:
        """``profile`` from out-of-fold scores (`cross_fitted_scores`), ``gold`` 0/1 per
        candidate, ``n_gold`` gold subjects per record. Early stopping on 10 % of the
        records (all their limit/threshold rows held out together). ``progress``: each
        regressor's boosting rounds, as phase ``quality recall`` / ``quality precision``
        (`tagalign.suggest.fusion.boost`)."""
        self.feature_names_ = profile.feature_names()
        Xs, recall, precision = [], [], []
        for limit in LIMITS:
            for threshold in THRESHOLDS:
                Xs.append(profile.features(limit, threshold))
                r, p = profile.targets(gold, n_gold, limit, threshold)
                recall.append(r)
                precision.append(p)
        X = np.vstack(Xs)
        record = np.tile(np.arange(len(profile)), len(Xs))
        rng = np.random.default_rng(self.config.seed)
        val = np.isin(record, rng.choice(len(profile), max(1, len(profile) // 10),
                                         replace=False))
        params = {**LGB_PARAMS, "seed": self.config.seed, "num_threads": self.num_threads}
        for name, y in (("recall", np.concatenate(recall)),
                        ("precision", np.concatenate(precision))):
            dtrain = lgb.Dataset(X[~val], y[~val], feature_name=self.feature_names_)
            dval = lgb.Dataset(X[val], y[val], reference=dtrain)
            self.boosters_[name] = boost(params, dtrain, dval, self.config.num_rounds,
                                         self.config.early_stopping, progress,
                                         f"quality {name}")
        return self

    def predict(self, profile: CandidateProfile, limit: int, threshold: float,
                threads: int = 1) -> list[Quality]:
        if profile.feature_names() != self.feature_names_:
            raise ValueError(f"quality features {profile.feature_names()} differ from the "
                             f"trained ones {self.feature_names_}")
        X = profile.features(limit, threshold)
        out = {name: np.clip(b.predict(X, num_iteration=b.best_iteration or None,
                                       num_threads=threads), 0, 1)
               for name, b in self.boosters_.items()}
        return [Quality(float(r), float(p))
                for r, p in zip(out["recall"], out["precision"], strict=True)]

    def importance(self) -> dict[str, float]:
        gain = self.boosters_["recall"].feature_importance("gain")
        return dict(zip(self.feature_names_, (gain / max(gain.sum(), 1e-12)).round(4).tolist(),
                        strict=True))

    def save(self, path: Path) -> None:
        for name, booster in self.boosters_.items():
            write_bytes_atomic(path / f"{name}.txt", booster.model_to_string().encode("utf-8"))
        if self.data_ is not None:
            self.data_.save(path / "data")
        write_json_atomic(path / "quality.json", {
            "features": self.feature_names_, "targets": sorted(self.boosters_),
            "limits": list(LIMITS), "thresholds": list(THRESHOLDS),
            "num_rounds": self.config.num_rounds, "weights": list(self.weights_),
            "data": self.data_ is not None})

    @classmethod
    def load(cls, path: Path) -> QualityEstimator:
        meta = read_json(path / "quality.json")
        self = cls(QualityConfig(num_rounds=meta["num_rounds"]))
        self.feature_names_ = meta["features"]
        self.boosters_ = {name: lgb.Booster(model_str=(path / f"{name}.txt").read_text("utf-8"))
                          for name in meta["targets"]}
        self.weights_ = as_weights(meta.get("weights", NO_CORRECTION))
        if meta.get("data"):
            self.data_ = QualityData.load(path / "data")
        return self
