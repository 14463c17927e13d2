"""The stacker of `subjects-stack`: per (record, domain) features → P(domain), and the
cross-fitting that keeps its threshold tuning honest.

Two kinds, both over `tagalign.classify.profiles.FEATURES`:

* ``lightgbm`` — one gradient-boosted model pooled over all domains (the domain a
  categorical feature), so a rare domain borrows how text and subject evidence combine from
  the frequent ones; saved as LightGBM's own text model format. With ``bag`` > 1 it is
  ``bag`` such models of seeds ``seed``, ``seed`` + 1, …, their probabilities averaged:
  one model's row and feature subsampling moved the scored micro-F1 by ±0.003 from seed
  to seed (measured, docs/classify.md), and the average of five is steadier and better;
* ``logistic`` — one logistic regression per domain (scikit-learn), standardised features;
  saved as coefficients (npy).

`cross_fit` learns ``folds`` stackers, each on the records outside its fold, and scores each
record only with the stacker that did not see it (the out-of-fold scores the thresholds are
tuned on); then the stacker is learned again on all records.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.errors import InputError, ModelFormatError, trained
from tagalign.io import load_npy, read_json, save_npy_atomic, write_json_atomic
from tagalign.io.atomic import write_bytes_atomic

KINDS = ("lightgbm", "logistic")
STACKER = "the domain stacker"  # what NotTrainedError names


class DomainStacker:
    """``kind`` (`KINDS`) with its parameters; `fit` on (records × domains × features) and
    (records × domains) gold; `predict_proba` → (records × domains). Not the hybrid's
    trainer (`tagalign.train.stacking.HybridTrainer`)."""

    def __init__(self, kind: str = "lightgbm", rounds: int = 300, learning_rate: float = 0.05,
                 leaves: int = 15, C: float = 1.0, seed: int = 0, threads: int = 0,
                 bag: int = 1):
        if kind not in KINDS:
            raise InputError(f"stacker must be one of {KINDS}, not {kind!r}")
        if int(bag) < 1:
            raise InputError(f"stacker bag must be at least 1, not {bag}")
        #: LightGBM models averaged (a logistic regression is deterministic: always one)
        self.bag = int(bag) if kind == "lightgbm" else 1
        self.kind, self.rounds, self.learning_rate, self.leaves = kind, rounds, learning_rate, \
            leaves
        self.C, self.seed, self.threads = C, seed, threads
        self.boosters_: list[Any] = []
        self.mean_: np.ndarray | None = None
        self.scale_: np.ndarray | None = None
        self.coef_: np.ndarray | None = None  # (domains × features)
        self.intercept_: np.ndarray | None = None

    # -- learning ---------------------------------------------------------------------
    def fit(self, X: np.ndarray, y: np.ndarray) -> DomainStacker:
        if self.kind == "lightgbm":
            self._fit_lightgbm(X, y)
        else:
            self._fit_logistic(X, y)
        return self

    def _pooled(self, X: np.ndarray) -> np.ndarray:
        """(records·domains × features+1): the features, then the domain's column index."""
        n, d, f = X.shape
        dom = np.broadcast_to(np.arange(d, dtype=np.float32)[None, :, None], (n, d, 1))
        return np.concatenate([X, dom], axis=2).reshape(n * d, f + 1)

    def _fit_lightgbm(self, X: np.ndarray, y: np.ndarray) -> None:
        import lightgbm as lgb

        params = {"objective": "binary", "learning_rate": self.learning_rate,
                  "num_leaves": self.leaves, "min_data_in_leaf": 20, "feature_fraction": 0.9,
                  "bagging_fraction": 0.9, "bagging_freq": 1, "seed": self.seed,
                  "deterministic": True, "force_row_wise": True, "verbosity": -1,
                  "num_threads": self.threads or 0}
        data = lgb.Dataset(self._pooled(X), y.reshape(-1).astype(np.float32),
                           categorical_feature=[X.shape[2]], free_raw_data=False)
        self.boosters_ = [lgb.train({**params, "seed": self.seed + i}, data,
                                    num_boost_round=self.rounds) for i in range(self.bag)]

    def _fit_logistic(self, X: np.ndarray, y: np.ndarray) -> None:
        from sklearn.linear_model import LogisticRegression

        n, d, f = X.shape
        flat = X.reshape(n * d, f)
        self.mean_, self.scale_ = flat.mean(0), flat.std(0) + 1e-6
        Z = (X - self.mean_) / self.scale_
        self.coef_ = np.zeros((d, f), np.float32)
        self.intercept_ = np.zeros(d, np.float32)
        for j in range(d):
            if y[:, j].min() == y[:, j].max():  # a domain on no (or every) tuning record
                self.intercept_[j] = -20.0 if y[:, j].max() == 0 else 20.0
                continue
            lr = LogisticRegression(C=self.C, max_iter=1000, random_state=self.seed)
            lr.fit(Z[:, j, :], y[:, j].astype(int))
            self.coef_[j], self.intercept_[j] = lr.coef_.ravel(), float(lr.intercept_[0])

    # -- scoring ----------------------------------------------------------------------
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        n, d, _ = X.shape
        if n == 0:
            return np.zeros((0, d), np.float32)
        if self.kind == "lightgbm":
            rows = self._pooled(X)
            p = np.mean([b.predict(rows, num_threads=self.threads or 0)
                         for b in self.boosters_], axis=0)
            return np.asarray(p, np.float32).reshape(n, d)
        Z = (X - self.mean_) / self.scale_
        logits = np.einsum("ndf,df->nd", Z, trained(self.coef_, STACKER)) + self.intercept_
        return (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)

    # -- persistence ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "rounds": self.rounds, "learning_rate": self.learning_rate,
                "leaves": self.leaves, "C": self.C, "seed": self.seed, "bag": self.bag}

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / "stacker.json", self.config())
        if self.kind == "lightgbm":
            for i, booster in enumerate(self.boosters_):
                write_bytes_atomic(folder / _member(i),
                                   booster.model_to_string().encode("utf-8"))
        else:
            for name in ("mean_", "scale_", "coef_", "intercept_"):
                save_npy_atomic(folder / f"{name.rstrip('_')}.npy", getattr(self, name))

    @classmethod
    def load(cls, folder: Path, threads: int = 0) -> DomainStacker:
        self = cls(**read_json(folder / "stacker.json"), threads=threads)
        if self.kind == "lightgbm":
            import lightgbm as lgb

            missing = [_member(i) for i in range(self.bag) if not (folder / _member(i)).exists()]
            if missing:
                raise ModelFormatError(f"{folder}: the stacker's {', '.join(missing)} is "
                                       "missing; retrain the domain model")
            self.boosters_ = [lgb.Booster(model_str=(folder / _member(i)).read_text("utf-8"))
                              for i in range(self.bag)]
        else:
            for name in ("mean_", "scale_", "coef_", "intercept_"):
                setattr(self, name, load_npy(folder / f"{name.rstrip('_')}.npy"))
            if trained(self.coef_, STACKER).shape[0] != len(trained(self.intercept_, STACKER)):
                raise ModelFormatError(f"{folder}: stacker coefficients do not match")
        return self


def _member(i: int) -> str:
    """The file of the ``i``-th bagged LightGBM model (the first keeps the name a model of
    one had, so models saved before bagging load as a bag of one)."""
    return "stacker.lgb.txt" if i == 0 else f"stacker-{i}.lgb.txt"


def fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    """Each of ``n`` records' fold (0 … folds−1), a seeded shuffle dealt round-robin."""
    if n < folds:
        raise InputError(f"cross-fitting needs at least {folds} dev records, got {n}")
    out = np.empty(n, np.int64)
    out[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return out


def cross_fit(make: DomainStacker, X: np.ndarray, y: np.ndarray, folds: int, seed: int,
              extra: tuple[np.ndarray, np.ndarray] | None = None,
              tick: Callable[[int, int], None] | None = None
              ) -> tuple[np.ndarray, np.ndarray, DomainStacker]:
    """``(out-of-fold scores, each record's fold, the stacker fit on all records)``; a
    record's out-of-fold score comes from the stacker learned on the other folds only.
    ``extra``: more (features, gold) every stacker learns from besides its folds (the
    subject project's held-out training records); they are never scored here.
    ``tick(done, total)``: told after each of the ``folds`` + 1 stackers is learned."""
    fold = fold_ids(len(X), folds, seed)
    oof = np.zeros(y.shape, np.float32)
    told = tick or (lambda done, total: None)

    def fit(Xs: np.ndarray, ys: np.ndarray) -> DomainStacker:
        if extra is not None and len(extra[0]):
            Xs, ys = np.concatenate([Xs, extra[0]]), np.concatenate([ys, extra[1]])
        return DomainStacker(**make.config(), threads=make.threads).fit(Xs, ys)

    told(0, folds + 1)
    for f in range(folds):
        held = fold == f
        oof[held] = fit(X[~held], y[~held]).predict_proba(X[held])
        told(f + 1, folds + 1)
    full = fit(X, y)
    told(folds + 1, folds + 1)
    return oof, fold, full
