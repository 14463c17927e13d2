"""Omikuji partitioned label trees on TF-IDF, one model per language (Annif's best backend).

Defaults are Annif's Bonsai-style settings: ``cluster_balanced=False``, ``cluster_k=100``,
``max_depth=3``. Omikuji saves its own non-pickle format, which we keep as is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import omikuji
import scipy.sparse as sp
from omikuji import _ThreadPoolHandle
from omikuji._libomikuji import ffi as _ffi
from omikuji._libomikuji import lib as _lib
from pydantic import Field

from tagalign.params import NonNegative, Positive
from tagalign.sampling import sample_indices
from tagalign.suggest.sources.base import (
    Batch,
    Candidates,
    FitContext,
    Source,
    SourceConfig,
    ranks_of,
    register_source,
)


def write_omikuji_data(path: Path, X: sp.csr_matrix, Y: sp.csr_matrix) -> None:
    """Omikuji/XMC text format: header ``n n_features n_labels``, then ``l1,l2 f:v f:v``."""
    X = X.tocsr()
    Y = Y.tocsr()
    with open(path, "w", encoding="ascii") as fh:
        fh.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
        for i in range(X.shape[0]):
            labels = ",".join(map(str, Y.indices[Y.indptr[i]:Y.indptr[i + 1]]))
            a, b = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{v:.6f}" for j, v in zip(X.indices[a:b], X.data[a:b],
                                                             strict=True))
            fh.write(f"{labels} {feats}\n")


@contextlib.contextmanager
def _quiet_native_output() -> Iterator[None]:
    """Omikuji's Rust core draws its own progress bars on fd 1/2; keep the console ours."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def train_omikuji(X: sp.csr_matrix, Y: sp.csr_matrix, *, cluster_k: int = 100,
                  max_depth: int = 3, n_trees: int = 3, cluster_balanced: bool = False,
                  collapse_every_n_layers: int = 0, n_threads: int = 0) -> omikuji.Model:
    """Omikuji's trees on the rows of ``X`` (features) and ``Y`` (labels) with labels."""
    hp = omikuji.Model.default_hyper_param()
    hp.n_trees = n_trees
    hp.cluster_balanced = cluster_balanced
    hp.cluster_k = cluster_k
    hp.max_depth = max_depth
    hp.collapse_every_n_layers = collapse_every_n_layers
    keep = np.diff(Y.tocsr().indptr) > 0  # records without labels teach nothing
    X, Y = X[keep], Y[keep]
    fd, tmp = tempfile.mkstemp(suffix=".omikuji.txt")
    os.close(fd)
    try:
        write_omikuji_data(Path(tmp), X, Y)
        with _quiet_native_output():
            return omikuji.Model.train_on_data(tmp, hp, n_threads=n_threads or None)
    finally:
        os.unlink(tmp)


log = logging.getLogger(__name__)
_LOCAL = threading.local()


def _own_pool() -> Any:
    """The calling thread's own one-thread Omikuji pool. A model's pool runs every call on
    its one worker, so threads that shared it waited for each other: two parts of a batch
    ran their trees one after the other (issue 18 profile: Omikuji was a third of each
    part's wall time). Pools are per thread and reused; a fork makes a new one."""
    handle = getattr(_LOCAL, "pool", None)
    if handle is None:
        handle = _LOCAL.pool = _ThreadPoolHandle(1, initialize=True)
    return handle.ptr


def _predict_rows(model: omikuji.Model, X: sp.csr_matrix, lo: int, hi: int, top_k: int,
                  beam_size: int) -> list[list[tuple[int, float]]]:
    """Rows ``lo:hi`` of ``X`` through Omikuji's C call, as `omikuji.Model.predict` makes
    it (same arguments, same results: tests/test_omikuji_source.py) but on the calling
    thread's pool (`_own_pool`; the model's own pool is never started) and from the CSR
    arrays themselves: the wrapper copies each feature into the C arrays one by one in
    Python, under the GIL."""
    ind = X.indices.astype(np.uint32, copy=False)
    val = X.data.astype(np.float32, copy=False)
    labels = np.empty(top_k, np.uint32)
    scores = np.empty(top_k, np.float32)
    out_l = _ffi.from_buffer("uint32_t[]", labels)
    out_s = _ffi.from_buffer("float[]", scores)
    pool = _own_pool()
    out: list[list[tuple[int, float]]] = []
    for i in range(lo, hi):
        a, b = int(X.indptr[i]), int(X.indptr[i + 1])
        if a == b:
            out.append([])
            continue
        n = _lib.omikuji_predict(model._model_ptr, beam_size, b - a,  # noqa: SLF001
                                 _ffi.from_buffer("uint32_t[]", ind[a:b]),
                                 _ffi.from_buffer("float[]", val[a:b]), top_k, out_l, out_s,
                                 pool)
        out.append(list(zip(labels[:n].tolist(), scores[:n].tolist(), strict=True)))
    return out


def predict_omikuji(model: omikuji.Model, X: sp.csr_matrix, top_k: int, beam_size: int = 10,
                    threads: int = 1, pool: Executor | None = None
                    ) -> list[list[tuple[int, float]]]:
    """Top-k (label, score) per row; with ``threads`` > 1 and a ``pool``, rows are spread
    over that many of the pool's threads (the native call releases the GIL, and each
    thread has its own Omikuji pool: `_own_pool`), which matters on small machines."""
    X = X.tocsr()
    if not X.has_sorted_indices:  # Omikuji wants each row's features in order
        X = X.sorted_indices()
    n = X.shape[0]
    workers = min(threads, max(1, n // 64))
    if workers <= 1 or pool is None:
        return _predict_rows(model, X, 0, n, top_k, beam_size)
    bounds = np.linspace(0, n, workers + 1).astype(int)
    futures = [pool.submit(_predict_rows, model, X, lo, hi, top_k, beam_size)
               for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    return [row for f in futures for row in f.result()]


def omikuji_seconds(assignments: int, n_trees: int = 1) -> float:
    """A rough time of Omikuji's fit on 2 cores: a power law through the default hybrid's
    three measured fits of one tree (docs/scaling.md, issue 48 stop 62: 41 s for 78,000
    records with 226,000 subject assignments, 448 s for 100,000 with about 696,000, 590 s
    for 100,000 with about 818,000), times the trees. The records' subjects and the TF-IDF
    vocabulary grew together there, so it is an order of magnitude, not a promise."""
    return 41.0 * (max(assignments, 1) / 226_000) ** 2.1 * n_trees


def _roughly(seconds: float) -> str:
    return "under a minute" if seconds < 60 else f"{seconds / 60:.0f} min"


#: a tree node splits into two children at least
ClusterK = Annotated[int, Field(ge=2)]


@dataclass(frozen=True)
class OmikujiConfig(SourceConfig):
    """Omikuji's Parabel-like trees: ``cluster_k`` children per node, ``max_depth`` levels;
    the ``top_k`` best subjects per record; ``n_trees`` trees, each from its own random
    clustering, their scores averaged (Omikuji's default 3; each tree costs as much
    training time as the others, so 1 is a third of it). ``max_records``: the trees learn
    from a seeded sample (``seed``) of at most that many of the split's labelled records
    (None: all; issue 48: their training time grows faster than the records,
    docs/scaling.md). ``beam_size``: the nodes each level of a tree keeps while predicting
    (Omikuji's default 10); prediction time is about linear in it."""

    top_k: Positive = 50
    cluster_k: ClusterK = 100
    max_depth: Positive = 3
    #: one tree, not Omikuji's three (issue 48, 90k dev avg R@5..20 0.6812 against three
    #: trees' 0.6758-0.6844 over four trainings; Omikuji's phases 239 s against 367 s,
    #: tagging 13 % faster, 184 MiB less model; a 1M training within 2 h)
    n_trees: Positive = 1
    #: issue 48: split A of 300k did not finish in 48 min; 90k trainings are unchanged
    max_records: Positive | None = 100_000
    beam_size: Positive = 10
    seed: NonNegative = 13


@register_source
class OmikujiSource(Source):
    name = "omikuji"
    features = ["omikuji_score", "omikuji_rank"]
    config_class = OmikujiConfig
    config: OmikujiConfig

    def __init__(self, config: OmikujiConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        self.models_: dict[str, omikuji.Model] = {}

    def fit(self, ctx: FitContext) -> None:
        """The trees of each language with ten records or more. Omikuji's library reports
        no progress (its Rust core draws bars of its own on the terminal, which are kept
        off: `_quiet_native_output`), so the fit announces its size and a rough time
        (`omikuji_seconds`) and reports the languages done (``omikuji: languages``)."""
        if ctx.Y is None:
            raise ValueError("Omikuji learns from the split's gold subjects (ctx.Y)")
        keep = self.sample(ctx.Y)
        parts = []
        for lang, (idx, X) in ctx.tfidf.items():
            rows = np.isin(idx, keep)
            if rows.sum() >= 10:
                parts.append((lang, X[rows], ctx.Y[np.asarray(idx)[rows]]))
        records, assigned = sum(X.shape[0] for _, X, _ in parts), sum(Y.nnz for *_, Y in parts)
        subjects = len(np.unique(np.concatenate([Y.indices for *_, Y in parts]))) if parts \
            else 0
        log.info(f"omikuji: {records:,} records ({assigned:,} subject assignments, "
                 f"{subjects:,} subjects) in {len(parts)} language(s), {self.config.n_trees} "
                 "tree(s); the library reports no progress: roughly "
                 f"{_roughly(omikuji_seconds(assigned, self.config.n_trees))} on 2 cores "
                 "(docs/recipes.md)")
        for k, (lang, X, Y) in enumerate(parts):
            if ctx.progress is not None:
                ctx.progress("omikuji: languages", k, len(parts))
            self.models_[lang] = train_omikuji(
                X, Y, cluster_k=self.config.cluster_k, max_depth=self.config.max_depth,
                n_trees=self.config.n_trees, n_threads=ctx.threads)
        if ctx.progress is not None:
            ctx.progress("omikuji: languages", len(parts), len(parts))

    def sample(self, Y: sp.csr_matrix) -> np.ndarray:
        """The rows of the split the trees learn from: every labelled record, or a seeded
        sample of ``max_records`` of them (`tagalign.sampling.sample_indices`)."""
        labelled = np.flatnonzero(np.diff(Y.tocsr().indptr) > 0)
        cap = self.config.max_records
        if cap is not None and len(labelled) > cap:
            log.info("Omikuji learns from a seeded sample of %d of %d records "
                     "(omikuji_max_records)", cap, len(labelled))
        return labelled[sample_indices(len(labelled), cap, self.config.seed)]

    def candidates(self, batch: Batch) -> Candidates:
        rows, preds = [], []
        for lang, (idx, X) in batch.tfidf.items():
            model = self.models_.get(lang)
            if model is None:
                continue
            preds_all = predict_omikuji(model, X, self.config.top_k, self.config.beam_size,
                                        threads=batch.threads, pool=batch.pool)
            rows.append(np.repeat(np.asarray(idx, np.int64), [len(p) for p in preds_all]))
            preds += preds_all
        flat = np.array([pair for p in preds for pair in p], np.float64).reshape(-1, 2)
        if not len(flat):
            return Candidates.empty(self.features)
        rows_all = np.concatenate(rows)  # each record's predictions together, best first
        return Candidates(rows_all, flat[:, 0].astype(np.int64),
                          np.column_stack([flat[:, 1], ranks_of(rows_all)]).astype(np.float32),
                          self.features)

    def save(self, path: Path) -> None:
        with _quiet_native_output():
            for lang, model in self.models_.items():
                model.save(str(path / f"omikuji-{lang}"))

    def load_state(self, path: Path, ctx: FitContext) -> None:
        with _quiet_native_output():
            for sub in sorted(path.glob("omikuji-*")):
                self.models_[sub.name.removeprefix("omikuji-")] = omikuji.Model.load(str(sub))
