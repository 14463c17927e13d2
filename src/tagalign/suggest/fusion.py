"""Fusion: merge the sources' candidates and score them with a learned ranker.

The ranker is a LightGBM binary classifier over per-candidate features (each source's
score and rank, subject frequency, record language/type, ...). It is trained on records
held out from the sources (stacking), so its scores are calibrated probabilities that a
candidate is a gold subject: a threshold of 0.3 means "about 30 % of these are right".
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import lightgbm as lgb
import numpy as np

from tagalign.errors import trained
from tagalign.io import read_json, write_bytes_atomic, write_json_atomic
from tagalign.params import Fraction, PartConfig, Positive
from tagalign.runtime import ProgressCallback
from tagalign.suggest.sources.base import Candidates

log = logging.getLogger(__name__)


@dataclass
class PairFeatures(Candidates):
    """What a feature-only source returns: no candidates of its own, but ``fill(rows, cols)``
    computes its features (NaN where it has no evidence) for the union of the others'."""

    fill: Callable[[np.ndarray, np.ndarray], np.ndarray]

    @classmethod
    def deferred(cls, names: list[str], fill: Callable[[np.ndarray, np.ndarray], np.ndarray]
                 ) -> PairFeatures:
        empty = Candidates.empty(names)
        return cls(empty.rows, empty.cols, empty.feats, names, fill)


def merge(cands: Sequence[Candidates], n_subjects: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Union of all (row, subject) pairs; features of a source that missed a pair are NaN.
    `PairFeatures` propose nothing and fill their columns for every pair of the union."""
    names = [n for c in cands for n in c.names]
    proposing = [c for c in cands if not isinstance(c, PairFeatures)]
    keys = np.concatenate([c.rows * n_subjects + c.cols for c in proposing]) if proposing \
        else np.zeros(0, np.int64)
    uniq, inv = np.unique(keys, return_inverse=True)
    rows, cols = uniq // n_subjects, uniq % n_subjects
    X = np.full((len(uniq), len(names)), np.nan, np.float32)
    start = col = 0
    for c in cands:
        f = len(c.names)
        if isinstance(c, PairFeatures):
            X[:, col:col + f] = c.fill(rows, cols)
        else:
            m = len(c.rows)
            X[inv[start:start + m], col:col + f] = c.feats
            start += m
        col += f
    return rows, cols, X, names


def top_k(rows: np.ndarray, cols: np.ndarray, scores: np.ndarray, n_rows: int, k: int
          ) -> list[list[tuple[int, float, int]]]:
    """Per row, the ``k`` best (subject position, score, candidate index), best first."""
    out: list[list[tuple[int, float, int]]] = [[] for _ in range(n_rows)]
    if len(rows) == 0:
        return out
    order = np.lexsort((-scores, rows))
    srows = rows[order]
    bounds = np.r_[0, np.flatnonzero(np.diff(srows)) + 1, len(srows)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        sel = order[a:min(b, a + k)]
        out[int(srows[a])] = list(zip(cols[sel].tolist(), scores[sel].tolist(), sel.tolist(),
                                      strict=True))
    return out


#: fewer candidate rows than this are scored on one thread (see `FusionRanker.predict`)
SMALL_PREDICT = 2_000


#: the score corrections of `blend`: (prior weight, support weight, unseen weight)
Weights = tuple[float, float, float]
NO_CORRECTION: Weights = (0.0, 0.0, 0.0)


def as_weights(saved: Sequence[float]) -> Weights:
    """Weights as saved: (prior, support) by a model saved before the unseen weight (0)."""
    values = [float(w) for w in saved] + [0.0] * (3 - len(saved))
    return values[0], values[1], values[2]


def blend(p: np.ndarray, prior: np.ndarray, n_sources: np.ndarray, prior_weight: float = 0.0,
          support_weight: float = 0.0, unseen_weight: float = 0.0,
          unseen_prior: float | None = None) -> np.ndarray:
    """score = σ(logit p + w_prior·prior + w_support·(n_sources − 1) + w_unseen·unseen).

    Suggest-time corrections of the ranker's probability ``p`` (tuned by `tagalign
    hyperopt`, no retraining): ``prior`` (log subject frequency, ≤ 0) favours frequent
    subjects for w_prior > 0 and rare ones for w_prior < 0; agreement of several sources
    counts more for w_support > 0; ``unseen`` (a candidate's prior at most
    ``unseen_prior``, the prior of a subject no training record carries: the pipeline's
    lowest) lifts the subjects the ranker can know only by their labels. Issue 66: the
    ranker learns from split B, whose gold split A's sources mostly carry, so it sees few
    unseen subjects that are right, and on dev it scores the unseen too low: of 4,000
    seeded dev records' unseen candidates scored 0.03, 0.07, 0.14 and 0.54 (mean), 0.04,
    0.10, 0.18 and 0.60 were gold, where the common ones' 0.04, 0.08, 0.16 and 0.49
    (`benchmarks/quality/unseen_weight.py`). All weights 0 return ``p`` unchanged."""
    if not prior_weight and not support_weight and not unseen_weight:
        return p
    q = np.clip(p, 1e-7, 1 - 1e-7)
    z = np.log(q / (1 - q)) + prior_weight * prior + support_weight * (n_sources - 1.0)
    if unseen_weight:
        if unseen_prior is None:
            raise ValueError("blend: an unseen weight needs the prior of an unseen subject")
        z = z + unseen_weight * (prior <= unseen_prior)
    return 1.0 / (1.0 + np.exp(-z))


DEFAULT_LGB = {
    "objective": "binary",
    "learning_rate": 0.05,
    "num_leaves": 63,
    "min_data_in_leaf": 40,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "verbose": -1,
    "seed": 13,
    "deterministic": True,
    "num_threads": 0,
}


def _groups(rows: np.ndarray) -> np.ndarray:
    """Sizes of the runs of equal ``rows`` (candidates come grouped by record, `merge`)."""
    if len(rows) == 0:
        return np.zeros(0, np.int64)
    return np.diff(np.r_[0, np.flatnonzero(np.diff(rows)) + 1, len(rows)])


class BoostingProgress:
    """A LightGBM callback that only reads: after each round, ``progress(phase, rounds
    done, rounds)`` (``env.iteration`` counts from ``env.begin_iteration``); it returns
    nothing and touches neither the booster nor the data, so the trees are the same with
    it or without (tests/test_hybrid.py)."""

    order = 40  # after early stopping (30): a round that stops training reports nothing
    before_iteration = False

    def __init__(self, progress: ProgressCallback, phase: str, rounds: int):
        self.progress, self.phase, self.rounds = progress, phase, rounds

    def __call__(self, env: lgb.callback.CallbackEnv) -> None:
        self.progress(self.phase, env.iteration - env.begin_iteration + 1, self.rounds)


def boost(params: dict[str, Any], dtrain: lgb.Dataset, dval: lgb.Dataset, rounds: int,
          early_stopping: int, progress: ProgressCallback | None = None,
          phase: str = "ranker") -> lgb.Booster:
    """``lgb.train`` for at most ``rounds`` rounds, stopping after ``early_stopping`` rounds
    without gain on ``dval`` (the ranker's and the quality estimate's boosting).
    ``progress``: ``(phase, 0, rounds)`` first, each round done (`BoostingProgress`), and
    ``(phase, rounds, rounds)`` at the end, also when early stopping ended it sooner."""
    callbacks: list[Callable[..., None]] = [lgb.early_stopping(early_stopping, verbose=False)]
    if progress is not None:
        progress(phase, 0, rounds)
        callbacks.append(BoostingProgress(progress, phase, rounds))
    booster = lgb.train(params, dtrain, num_boost_round=rounds, valid_sets=[dval],
                        callbacks=callbacks)
    if progress is not None:
        progress(phase, rounds, rounds)
    return booster


_COMPILE_LOCK = threading.Lock()
#: the largest difference between the compiled trees' scores and LightGBM's own that the
#: tests accept (both sum the same trees in double precision; tests/test_agreement.py)
COMPILED_TOLERANCE = 1e-12


def host_cpu() -> str:
    """The CPU the compiled trees are built for: LLVM's name and features of this host (an
    object built for another CPU may use instructions this one lacks: SIGILL)."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    return f"{llvm.get_host_cpu_name()}:" + hashlib.sha256(features.encode()).hexdigest()[:16]


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def private_dir(path: Path) -> bool:
    """Whether ``path`` is a folder only this user can write (owned by the effective user,
    no group or world write bit): a shared object loaded from anywhere else could be code
    that someone else put there."""
    import stat

    st = path.stat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and \
        not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


@functools.cache
def _process_cache() -> Path:
    """A folder of this process's own (made once), for when the cache is not private."""
    return Path(tempfile.mkdtemp(prefix="tagalign-ranker-"))


def _verified(target: Path, meta: Path, cpu: str) -> bool:
    """The cached object matches the hash and CPU recorded when it was built here."""
    if not (target.exists() and meta.exists()):
        return False
    try:
        info = read_json(meta)
    except (OSError, ValueError):
        return False
    return info.get("cpu") == cpu and info.get("sha256") == _file_sha256(target)


def compile_trees(model_str: str, cache_dir: Path) -> Any | None:
    """The trees of a LightGBM model compiled to native code by lleaves (Boehm et al.), or
    None when compiling fails (logged; LightGBM then predicts).

    Issue 18: LightGBM's own predict was a fifth of a batch suggest (about 1.9 ms of CPU per
    record for ~180 candidate rows); the compiled trees take about 0.2 ms and give the same
    scores within `COMPILED_TOLERANCE` (double precision, the same NaN routing). Compiling
    takes seconds, so the shared object is cached in ``cache_dir``, named by the model's
    hash: it is built on this machine from the model's text, never shipped with a model,
    and only the first load after training (or on a new machine) pays for it.

    Loading a shared object runs its code, so a cached one is used only when (issue 30)
    the cache is a folder only this user can write (else the trees are compiled into a
    private temporary folder, once per process) and its SHA-256 and the CPU it was built
    for (`host_cpu`) match the record written beside it when it was built; otherwise it is
    built again."""
    try:
        from importlib.metadata import version

        import lleaves

        digest = hashlib.sha256(model_str.encode("utf-8")).hexdigest()[:24]
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private_dir(cache_dir):
            log.warning("%s can be written by other users: the compiled ranker is built in a "
                        "private temporary folder instead of being cached there", cache_dir)
            cache_dir = _process_cache()
        cpu = host_cpu()
        target = cache_dir / f"ranker-{digest}-lleaves{version('lleaves')}.so"
        meta = target.with_suffix(".json")
        with _COMPILE_LOCK, tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            text = Path(tmp) / "model.txt"
            text.write_text(model_str, "utf-8")
            model = lleaves.Model(model_file=str(text))
            if _verified(target, meta, cpu):
                model.compile(cache=str(target))
            else:  # built beside the target, then renamed: readers never see half a file
                part = Path(tmp) / target.name
                model.compile(cache=str(part))
                write_json_atomic(meta, {"sha256": _file_sha256(part), "cpu": cpu,
                                         "lleaves": version("lleaves")})
                os.replace(part, target)
        return model
    except Exception as exc:  # noqa: BLE001 - any failure falls back to LightGBM itself
        log.warning("ranker not compiled (%s); LightGBM predicts instead", exc)
        return None


@dataclass(frozen=True)
class RankerConfig(PartConfig):
    """The ranker's settings: at most ``num_rounds`` boosting rounds, stopping after
    ``early_stopping`` rounds without gain on the held-out records."""

    num_rounds: Positive = 500
    early_stopping: Positive = 30
    #: the tail simulated (issue 66): this share of split B's records is added to the
    #: ranker's table again with its features made as if no split-A record carried the
    #: subjects at most ``tail_max_count`` of them carry (`HybridPipeline.blinded`), so
    #: the ranker sees rare headings look as new ones do — proposed by the label-reading
    #: sources alone — and learns how far to trust them (0: not simulated)
    tail_simulation: Fraction = 0.0
    tail_max_count: Positive = 4

    kind: ClassVar[str] = "ranker config"


class FusionRanker:
    """``config`` (or its fields as keywords); other keywords are LightGBM parameters
    (``num_threads``: the runtime's)."""

    def __init__(self, config: RankerConfig | None = None, **settings: Any):
        fields = RankerConfig.field_names()
        own = {k: v for k, v in settings.items() if k in fields}
        if config is not None and own:
            raise TypeError("FusionRanker: a config or its settings, not both")
        self.config = config if config is not None else RankerConfig(**own)
        self.lgb_params = {**DEFAULT_LGB,
                           **{k: v for k, v in settings.items() if k not in fields}}
        self.booster_: lgb.Booster | None = None
        self.feature_names_: list[str] = []
        #: the trees compiled by `compile` (None: LightGBM predicts); scores are the same
        #: within `COMPILED_TOLERANCE` for every batch, whatever its size
        self.compiled_: Any = None

    @property
    def _booster(self) -> lgb.Booster:
        return trained(self.booster_, "the fusion ranker")

    def compile(self, cache_dir: Path) -> bool:
        """Score every later batch with the trees compiled to native code (`compile_trees`;
        decided once, at load, by `tagalign.runtime.Runtime.compile_ranker`). False when
        compiling failed and LightGBM goes on predicting."""
        self.compiled_ = compile_trees(self._booster.model_to_string(), cache_dir)
        return self.compiled_ is not None

    def fit(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray, names: list[str],
            valid_fraction: float = 0.1, seed: int = 13,
            progress: ProgressCallback | None = None, phase: str = "ranker") -> FusionRanker:
        """Train with early stopping on a held-out fraction of the records (not of pairs);
        ``progress``: the boosting rounds as ``phase`` (`boost`)."""
        self.feature_names_ = list(names)
        rng = np.random.default_rng(seed)
        uniq = np.unique(rows)
        val_rows = rng.choice(uniq, size=max(1, int(len(uniq) * valid_fraction)), replace=False)
        is_val = np.isin(rows, val_rows)
        ranking = self.lgb_params["objective"] == "lambdarank"
        dtrain = lgb.Dataset(X[~is_val], y[~is_val], feature_name=self.feature_names_,
                             group=_groups(rows[~is_val]) if ranking else None,
                             free_raw_data=True)
        dval = lgb.Dataset(X[is_val], y[is_val], reference=dtrain,
                           group=_groups(rows[is_val]) if ranking else None)
        self.booster_ = boost(self.lgb_params, dtrain, dval, self.config.num_rounds,
                              self.config.early_stopping, progress, phase)
        return self

    def columns(self, names: list[str]) -> np.ndarray | None:
        """Positions in ``names`` of the features this ranker learned from, in its order
        (None: the same list). A ranker saved before a source or the pipeline gained
        features ignores the new columns; one that needs a column the pipeline no longer
        makes is refused with a message to retrain."""
        if names == self.feature_names_:
            return None
        missing = [n for n in self.feature_names_ if n not in names]
        if missing:
            raise ValueError(f"this model's ranker needs features {missing} that this version "
                             "of tagalign no longer computes: retrain the project "
                             "(tagalign train)")
        return np.array([names.index(n) for n in self.feature_names_])

    def predict(self, X: np.ndarray, names: list[str] | None = None, threads: int = 1
                ) -> np.ndarray:
        """Scores of the candidate rows ``X`` on up to ``threads`` threads; ``names``: X's
        columns, when they may differ from the ones the ranker learned from (`columns`)."""
        if len(X) == 0:
            return np.zeros(0, np.float32)
        cols = None if names is None else self.columns(names)
        if cols is not None:
            X = X[:, cols]
        # the rows of one or a few records (a few hundred): a thread team costs more to wake
        # than the trees take, and on a busy machine a descheduled thread stalls the rest;
        # every row is scored alone, so the scores are the same either way
        n = max(threads, 1) if len(X) >= SMALL_PREDICT else 1
        if self.compiled_ is not None:
            return self.compiled_.predict(np.asarray(X, np.float64), n_jobs=n)
        return self._booster.predict(X, num_iteration=self._booster.best_iteration or None,
                                     num_threads=n)

    def importance(self) -> dict[str, float]:
        gain = self._booster.feature_importance("gain")
        return dict(zip(self.feature_names_, (gain / gain.sum()).round(4).tolist(), strict=True))

    def save(self, path: Path) -> None:
        write_bytes_atomic(path / "ranker.txt",
                           self._booster.model_to_string().encode("utf-8"))
        write_json_atomic(path / "ranker.json", {"features": self.feature_names_,
                                                 "num_rounds": self.config.num_rounds})

    @classmethod
    def load(cls, path: Path) -> FusionRanker:
        meta = read_json(path / "ranker.json")
        self = cls(RankerConfig(num_rounds=meta["num_rounds"]))
        self.feature_names_ = meta["features"]
        self.booster_ = lgb.Booster(model_str=(path / "ranker.txt").read_text("utf-8"))
        return self
