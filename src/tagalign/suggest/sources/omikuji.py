"""Omikuji partitioned label trees on TF-IDF, one model per language (Annif's best backend).

Defaults are Annif's Bonsai-style settings: ``cluster_balanced=False``, ``cluster_k=100``,
``max_depth=3``. Omikuji saves its own non-pickle format, which we keep as is.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import omikuji
import scipy.sparse as sp

from tagalign.runtime import in_part
from tagalign.suggest.sources.base import Batch, Candidates, Source, register_source


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
                  max_depth: int = 3, cluster_balanced: bool = False,
                  collapse_every_n_layers: int = 0, n_threads: int = 0) -> omikuji.Model:
    hp = omikuji.Model.default_hyper_param()
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


def single_threaded(model: omikuji.Model) -> omikuji.Model:
    """Predict each row on the calling thread. Omikuji's default pool spreads one row's
    trees over all cores: waking it costs a single-record suggest more than the trees do,
    and batches spread their rows over threads of their own (`predict_omikuji`). The trees'
    scores are summed in tree order either way, so predictions are the same."""
    model.init_prediction_thread_pool(1)
    return model


def predict_omikuji(model: omikuji.Model, X: sp.csr_matrix, top_k: int, beam_size: int = 10,
                    n_threads: int = 0) -> list[list[tuple[int, float]]]:
    """Top-k (label, score) per row; rows are spread over threads (the native call
    releases the GIL), which matters on small machines."""
    X = X.tocsr()

    def run(lo: int, hi: int) -> list[list[tuple[int, float]]]:
        out = []
        for i in range(lo, hi):
            a, b = X.indptr[i], X.indptr[i + 1]
            pairs = list(zip(X.indices[a:b].tolist(), X.data[a:b].tolist(), strict=True))
            out.append(model.predict(pairs, beam_size=beam_size, top_k=top_k) if pairs else [])
        return out

    n = X.shape[0]
    workers = 1 if in_part() else min(n_threads or os.cpu_count() or 1, max(1, n // 64))
    if workers <= 1:
        return run(0, n)
    bounds = np.linspace(0, n, workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        parts = pool.map(run, bounds[:-1], bounds[1:])
    return [row for part in parts for row in part]


@register_source
class OmikujiSource(Source):
    name = "omikuji"
    features = ["omikuji_score", "omikuji_rank"]

    def __init__(self, top_k: int = 50, cluster_k: int = 100, max_depth: int = 3,
                 n_threads: int = 0, **params: Any):
        super().__init__(top_k=top_k, cluster_k=cluster_k, max_depth=max_depth, **params)
        self.top_k = top_k
        self.cluster_k = cluster_k
        self.max_depth = max_depth
        self.n_threads = n_threads
        self.models_: dict[str, omikuji.Model] = {}

    def fit(self, ctx: Any) -> None:
        for lang, (idx, X) in ctx.tfidf.items():
            if len(idx) < 10:
                continue
            self.models_[lang] = single_threaded(train_omikuji(
                X, ctx.Y[idx], cluster_k=self.cluster_k, max_depth=self.max_depth,
                n_threads=self.n_threads))

    def candidates(self, batch: Batch) -> Candidates:
        rows, cols, scores, ranks = [], [], [], []
        for lang, (idx, X) in batch.tfidf.items():
            model = self.models_.get(lang)
            if model is None:
                continue
            preds_all = predict_omikuji(model, X, self.top_k, n_threads=self.n_threads)
            for r, preds in zip(idx, preds_all, strict=True):
                for rank, (label, score) in enumerate(preds, 1):
                    rows.append(r)
                    cols.append(label)
                    scores.append(score)
                    ranks.append(rank)
        return Candidates.from_lists(rows, cols, np.column_stack([scores, ranks]),
                                     self.features)

    def save(self, path: Path) -> None:
        with _quiet_native_output():
            for lang, model in self.models_.items():
                model.save(str(path / f"omikuji-{lang}"))

    def load_state(self, path: Path, ctx: Any) -> None:
        with _quiet_native_output():
            for sub in sorted(path.glob("omikuji-*")):
                self.models_[sub.name.removeprefix("omikuji-")] = single_threaded(
                    omikuji.Model.load(str(sub)))
