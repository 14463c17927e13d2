"""Record-neighbour sources: similar training records vote for their gold subjects.

score(s) = Σ_{n ∈ kNN(d), s ∈ gold(n)} sim(d, n)^p — the method that won SemEval-2025's
tib-core track. Two neighbourhoods: TF-IDF cosine within a language, and cosine of the
hybrid's bilingual embeddings (across languages).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import scipy.sparse as sp

from tagalign.index import VectorIndex
from tagalign.io import (
    load_csr,
    load_npy,
    read_json,
    save_csr_atomic,
    save_npy_atomic,
    write_json_atomic,
)
from tagalign.suggest.sources.base import (
    Batch,
    Candidates,
    Source,
    ranks_of,
    register_source,
    row_entries,
)

#: query rows per TF-IDF product: a chunk's similarities are dense (most training records
#: share a common term with the query), and 64 rows (12 MB for 50,000 records) cost 25 %
#: less than 256 did, by staying nearer the cache (issue 18 profile)
QUERY_CHUNK = 64


def vote(nbr: np.ndarray, sims: np.ndarray, Y: sp.csr_matrix, power: float, top_k: int,
         prefix: str) -> tuple[Candidates, np.ndarray]:
    """Turn (n × K) neighbour positions/similarities into top-k voted subjects + features.

    The votes are summed with NumPy over each neighbour's gold subjects, not as the sparse
    products W·Y: for one record scipy's per-call work (two products, a copy, fancy
    indexing, a per-row top-k loop) cost more than the arithmetic, and a batch's per-row
    loop goes too. Scores are the same sums (float32); ties are broken by subject
    position, as `topk_per_row` does (tests/test_vote.py compares with the sparse form)."""
    n, k = nbr.shape
    valid = ((nbr >= 0) & (sims > 0)).ravel()
    rows = np.repeat(np.arange(n), k)[valid]
    cols = nbr.ravel()[valid]
    w = np.power(sims.ravel()[valid], power)
    pos, lens = row_entries(Y.indptr, cols)
    subj = Y.indices[pos].astype(np.int64)
    y = Y.data[pos].astype(np.float64)
    key = np.repeat(rows, lens).astype(np.int64) * Y.shape[1] + subj
    keys, inv = np.unique(key, return_inverse=True)
    score = np.bincount(inv, weights=np.repeat(w.astype(np.float64), lens) * y,
                        minlength=len(keys)).astype(np.float32)
    count = np.bincount(inv, weights=y, minlength=len(keys)).astype(np.float32)
    krow, kcol = keys // Y.shape[1], keys % Y.shape[1]
    keep = score != 0  # as the sparse product, which stores no explicit zeros here
    order = np.lexsort((kcol, -score, krow))
    order = order[keep[order]]
    r, c, v, counts = krow[order], kcol[order], score[order], count[order]
    rank = ranks_of(r)
    top = rank <= top_k
    r, c, v, counts, rank = r[top], c[top], v[top], counts[top], rank[top]
    total = np.bincount(rows, weights=w.astype(np.float64), minlength=n).astype(np.float32)
    norm = v / np.maximum(total[r], 1e-9)
    top1 = sims[:, 0] if k else np.zeros(n)
    feats = np.column_stack([v, norm, counts, rank, top1[r]]).astype(np.float32)
    return Candidates(r, c, feats, _names(prefix)), nbr


def keep_top_terms(X: sp.csr_matrix, n: int) -> sp.csr_matrix:
    """Keep each row's ``n`` heaviest terms: the product's cost grows with query terms,
    while the light ones barely move the neighbour ranking."""
    X = X.tocsr(copy=True)
    for r in range(X.shape[0]):
        a, b = X.indptr[r], X.indptr[r + 1]
        if b - a > n:
            d = X.data[a:b]
            d[np.argpartition(d, b - a - n)[: b - a - n]] = 0.0
    X.eliminate_zeros()
    return X


def _names(prefix: str) -> list[str]:
    return [f"{prefix}_vote", f"{prefix}_share", f"{prefix}_count", f"{prefix}_rank",
            f"{prefix}_top1"]


@register_source
class TfidfNeighbours(Source):
    """kNN by TF-IDF cosine among training records of the same language."""

    name = "tfidf_knn"
    features = _names("tknn")

    def __init__(self, k: int = 30, power: float = 2.0, top_k: int = 50,
                 query_terms: int = 0, **params: Any):
        super().__init__(k=k, power=power, top_k=top_k, query_terms=query_terms, **params)
        self.k, self.power, self.top_k = k, power, top_k
        self.query_terms = query_terms
        self.X_: dict[str, sp.csr_matrix] = {}
        self.rows_: dict[str, np.ndarray] = {}  # memory row of each X_ row
        self._XT: dict[str, tuple[sp.csr_matrix, sp.csr_matrix]] = {}
        self.memory: Any = None

    def fit(self, ctx: Any) -> None:
        self.memory = ctx.memory
        for lang, (idx, X) in ctx.tfidf.items():
            self.X_[lang] = X.tocsr()
            self.rows_[lang] = np.asarray(idx, np.int64)

    def neighbours(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        n = len(batch)
        nbr = np.full((n, self.k), -1, np.int64)
        sims = np.zeros((n, self.k), np.float32)
        for lang, (idx, Xq) in batch.tfidf.items():
            if lang not in self.X_:
                continue
            XtT = self._transposed(lang)
            if self.query_terms:
                Xq = keep_top_terms(Xq, self.query_terms)
            for start in range(0, len(idx), QUERY_CHUNK):
                part = idx[start:start + QUERY_CHUNK]
                S = (Xq[start:start + QUERY_CHUNK] @ XtT).toarray()
                kk = min(self.k, S.shape[1])
                top = np.argpartition(-S, kk - 1, axis=1)[:, :kk]
                topv = np.take_along_axis(S, top, 1)
                order = np.argsort(-topv, axis=1)
                top = np.take_along_axis(top, order, 1)
                nbr[part, :kk] = self.rows_[lang][top]
                sims[part, :kk] = np.take_along_axis(topv, order, 1)
        return nbr, sims

    def _transposed(self, lang: str) -> sp.csr_matrix:
        """Xᵀ in CSR, cached: the query product needs it and it only changes on `learn`."""
        X = self.X_[lang]
        cached = self._XT.get(lang)
        if cached is None or cached[0] is not X:
            cached = (X, X.T.tocsr())
            self._XT[lang] = cached
        return cached[1]

    def candidates(self, batch: Batch) -> Candidates:
        nbr, sims = self.neighbours(batch)
        cands, batch.evidence[self.name] = vote(nbr, sims, self.memory.Y, self.power,
                                                self.top_k, "tknn")
        return cands

    def learn(self, batch: Batch, rows: np.ndarray) -> None:
        for lang, (idx, X) in batch.tfidf.items():
            if lang in self.X_:
                # rows_ grows first: a concurrent reader never sees an X_ row without one
                self.rows_[lang] = np.r_[self.rows_[lang], rows[idx]]
                self.X_[lang] = sp.vstack([self.X_[lang], X]).tocsr()
                self._XT.pop(lang, None)  # stale: rebuilt on the next query

    def save(self, path: Path) -> None:
        meta = {}
        for lang, X in self.X_.items():
            save_csr_atomic(path, f"tknn-{lang}", X)
            save_npy_atomic(path / f"tknn-rows-{lang}.npy", self.rows_[lang])
            meta[lang] = list(X.shape)
        write_json_atomic(path / "tknn.json", meta)

    def load_state(self, path: Path, ctx: Any) -> None:
        """With ``ctx.mmap`` the record matrices stay in their files (a model saved before
        2026-11 as .npz is read whole); the transposed copy queries use is built in memory
        on first use either way, so mapping saves the original's share."""
        self.memory = ctx.memory
        mmap = getattr(ctx, "mmap", False)
        for lang, shape in read_json(path / "tknn.json").items():
            if isinstance(shape, int):  # saved before 2026-11 as one .npz (rows only in meta)
                self.X_[lang] = sp.load_npz(path / f"tknn-{lang}.npz").tocsr()
            else:
                self.X_[lang] = load_csr(path, f"tknn-{lang}", tuple(shape), mmap=mmap)
            self.rows_[lang] = load_npy(path / f"tknn-rows-{lang}.npy", mmap)


@register_source
class EmbeddingNeighbours(Source):
    """kNN by cosine of bilingual record embeddings (across languages).

    ``index``: a `VectorIndex` kind; ``ivfsq8`` / ``ivfpq`` compress the record vectors for
    memories of millions of records (hybrid parameter ``ann_index``)."""

    name = "emb_knn"
    features = _names("eknn")

    def __init__(self, k: int = 30, power: float = 2.0, top_k: int = 50, index: str = "ivf",
                 **params: Any):
        super().__init__(k=k, power=power, top_k=top_k, index=index, **params)
        self.k, self.power, self.top_k = k, power, top_k
        self.index_kind = index
        self.index_: VectorIndex | None = None
        self.memory: Any = None
        self._lock = threading.Lock()  # faiss: no search while `learn` adds vectors

    def fit(self, ctx: Any) -> None:
        self.memory = ctx.memory
        self.index_ = VectorIndex(self.index_kind).build(ctx.embeddings)

    def candidates(self, batch: Batch) -> Candidates:
        with self._lock:
            sims, nbr = self.index_.search(batch.embeddings, self.k)
        cands, batch.evidence[self.name] = vote(nbr.astype(np.int64), sims, self.memory.Y,
                                                self.power, self.top_k, "eknn")
        return cands

    def learn(self, batch: Batch, rows: np.ndarray) -> None:
        with self._lock:
            self.index_.add(batch.embeddings)

    def save(self, path: Path) -> None:
        self.index_.save(path / "index")

    def load_state(self, path: Path, ctx: Any) -> None:
        self.memory = ctx.memory
        if (path / "index").exists():
            dim = ctx.encoder.dim if getattr(ctx, "encoder", None) is not None else None
            self.index_ = VectorIndex.load(path / "index", dim=dim,
                                           mmap=getattr(ctx, "mmap", False))
            if len(self.index_) != len(self.memory):
                # index rows are memory rows: another memory would vote with wrong labels
                raise ValueError(f"{path / 'index'}: {len(self.index_)} record vectors, but "
                                 f"the neighbour memory holds {len(self.memory)} records; "
                                 "the index belongs to another model")
        else:  # models saved before VectorIndex: a flat faiss file
            old = faiss.read_index(str(path / "eknn.faiss"))
            self.index_ = VectorIndex(self.index_kind).build(old.reconstruct_n(0, old.ntotal))
