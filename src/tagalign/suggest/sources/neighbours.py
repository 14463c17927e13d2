"""Record-neighbour sources: similar training records vote for their gold subjects.

score(s) = Σ_{n ∈ kNN(d), s ∈ gold(n)} sim(d, n)^p — the method that won SemEval-2025's
tib-core track. Two neighbourhoods: TF-IDF cosine within a language, and cosine of the
hybrid's bilingual embeddings (across languages).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from tagalign.errors import ModelFormatError
from tagalign.index import VectorIndex
from tagalign.io import (
    load_csr,
    load_npy,
    read_json,
    save_csr_atomic,
    save_npy_atomic,
    write_json_atomic,
)
from tagalign.params import NonNegativeFloat, Positive
from tagalign.runtime import release_free_memory
from tagalign.suggest.sources.base import (
    MAX_REASON_ITEMS,
    Batch,
    Candidates,
    FitContext,
    Source,
    SourceConfig,
    ranks_of,
    register_source,
    row_entries,
)
from tagalign.suggest.sources.memory import RecordMemory

#: query rows per TF-IDF product: a chunk's similarities are dense (most training records
#: share a common term with the query), and 64 rows (12 MB for 50,000 records) cost 25 %
#: less than 256 did, by staying nearer the cache (issue 18 profile)
QUERY_CHUNK = 64


def _names(prefix: str) -> list[str]:
    return [f"{prefix}_vote", f"{prefix}_share", f"{prefix}_count", f"{prefix}_rank",
            f"{prefix}_top1"]


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


@dataclass
class _SearchIndex:
    """One language's query structures, built from its record matrix ``X`` on first use.

    ``XT``: the index the product runs on (terms × records), without the common terms when
    pruning. ``common``: those terms' positions, and ``Xc``: the records' weights on them
    (records × common terms), which rescoring adds back."""

    X: sp.csr_matrix
    XT: sp.csr_matrix
    common: np.ndarray
    Xc: sp.csr_matrix | None


@dataclass(frozen=True)
class VotingConfig(SourceConfig):
    """What both neighbour sources take: ``k`` neighbours, each voting with its similarity
    to the power ``power``, for the ``top_k`` best subjects."""

    k: Positive = 30
    power: NonNegativeFloat = 2.0
    top_k: Positive = 50

    recipe_params: ClassVar[Mapping[str, str]] = {"k": "knn_k", "power": "knn_power"}


@dataclass(frozen=True)
class TfidfNeighboursConfig(VotingConfig):
    """``prune_df``, ``rescore``: the two-step search (`TfidfNeighbours`; 0: exact)."""

    prune_df: float = 0.0
    rescore: int = 300

    recipe_params: ClassVar[Mapping[str, str]] = {
        **VotingConfig.recipe_params, "prune_df": "knn_prune_df", "rescore": "knn_rescore"}


@dataclass(frozen=True)
class EmbeddingNeighboursConfig(VotingConfig):
    """``index``: the `VectorIndex` kind of the record vectors."""

    index: str = "ivf"

    recipe_params: ClassVar[Mapping[str, str]] = {**VotingConfig.recipe_params,
                                                  "index": "ann_index"}


class _Voting(Source):
    """What both neighbour sources share: votes of a `RecordMemory`, and as reasons the
    neighbours that voted for a subject."""

    memory: RecordMemory | None

    def reasons(self, batch: Batch, r: int, positions: Sequence[int]
                ) -> dict[int, dict[str, Any]]:
        """Subject position → the memory's records among record ``r``'s neighbours that
        have it (id and title, nearest first)."""
        found = batch.evidence.get(self.name)
        if found is None or self.memory is None:
            return {}
        nbrs = found[0]
        wanted = set(positions)
        voters: dict[int, list[int]] = {}
        Y = self.memory.Y
        for n in nbrs[r]:
            if n >= 0:
                for pos in Y.indices[Y.indptr[n]:Y.indptr[n + 1]].tolist():
                    if pos in wanted:
                        voters.setdefault(pos, []).append(int(n))
        # the pipeline joins both sources' lists and keeps the first MAX_REASON_ITEMS: more
        # from one source can never be shown
        voters = {pos: rows[:MAX_REASON_ITEMS] for pos, rows in voters.items()}
        return {pos: {"neighbours": [{"id": self.memory.ids[n], "title": self.memory.titles[n]}
                                     for n in rows]} for pos, rows in voters.items()}

    def record_neighbours(self, batch: Batch) -> list[list[tuple[str, float]]] | None:
        """Each record's neighbours in this batch's search, (memory record id, similarity)
        nearest first: what a domain model reads of them (`tagalign.classify.neighbours`)."""
        found = batch.evidence.get(self.name)
        if found is None or self.memory is None:
            return None
        nbrs, sims = found
        ids = self.memory.ids
        return [[(ids[n], float(s)) for n, s in zip(row.tolist(), srow.tolist(), strict=True)
                 if n >= 0 and s > 0] for row, srow in zip(nbrs, sims, strict=True)]


def common_terms(XT: sp.csr_matrix, prune_df: float) -> np.ndarray:
    """Terms in more than ``prune_df`` of the records (0: none)."""
    if prune_df <= 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.diff(XT.indptr) > prune_df * XT.shape[1])


def largest(S: np.ndarray, k: int) -> np.ndarray:
    """Columns of the ``k`` largest values of each row of ``S`` (in no order). torch's
    ``topk`` when torch is loaded (the hybrid's encoder loads it): 2.5× faster than
    NumPy's ``argpartition`` on 64 × 49,000 similarities, which was an eighth of a batch
    suggest's time (py-spy, full-train hybrid, one thread). Not imported for this alone
    (hundreds of MB); ties at the k-th value may take other columns than NumPy would."""
    torch = sys.modules.get("torch")
    if torch is None or k >= S.shape[1]:
        return np.argpartition(-S, k - 1, axis=1)[:, :k]
    return torch.topk(torch.from_numpy(np.ascontiguousarray(S)), k, dim=1,
                      sorted=False).indices.numpy()


@register_source
class TfidfNeighbours(_Voting):
    """kNN by TF-IDF cosine among training records of the same language.

    ``prune_df`` > 0 searches in two steps (issue 18: this product was a third of a batch
    suggest). A query shares a term found in more than 5 % of the records with most of
    them, so its exact similarities are nearly dense and their product costs the most. The
    product therefore leaves those common terms out. The ``rescore`` records it ranks
    highest then get their exact cosine, the common terms' part added back from a small
    records × common-terms matrix. The neighbours' similarities are exact. The first step
    misses a neighbour only when common terms alone would have lifted it into the top k.
    On 1,000 seeded dev records, with a 5 % cut and 300 rescored, the neighbours found hold
    99.9 % (German) and 99.4 % (English) of the exact search's vote weight (similarity²),
    and the search takes 0.72 s instead of 1.36 (`benchmarks/tfidf_search.py`).
    ``prune_df=0`` is the exact search."""

    name = "tfidf_knn"
    features = _names("tknn")
    config_class = TfidfNeighboursConfig
    config: TfidfNeighboursConfig

    def __init__(self, config: TfidfNeighboursConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        self.X_: dict[str, sp.csr_matrix] = {}
        self.rows_: dict[str, np.ndarray] = {}  # memory row of each X_ row
        self._index: dict[str, _SearchIndex] = {}
        self.memory = None

    def fit(self, ctx: FitContext) -> None:
        self.memory = ctx.memory
        for lang, (idx, X) in ctx.tfidf.items():
            self.X_[lang] = X.tocsr()
            self.rows_[lang] = np.asarray(idx, np.int64)

    def neighbours(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        n, k = len(batch), self.config.k
        nbr = np.full((n, k), -1, np.int64)
        sims = np.zeros((n, k), np.float32)
        for lang, (idx, Xq) in batch.tfidf.items():
            if lang not in self.X_:
                continue
            index = self._search_index(lang)
            for start in range(0, len(idx), QUERY_CHUNK):
                part = idx[start:start + QUERY_CHUNK]
                top, topv = self._search(index, Xq[start:start + QUERY_CHUNK])
                nbr[part, :top.shape[1]] = self.rows_[lang][top]
                sims[part, :top.shape[1]] = topv
        return nbr, sims

    def _search(self, index: _SearchIndex, q: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """The k best records of each query row (positions in X, best first) and their
        cosines; see the class docstring for the two steps."""
        S = (q @ index.XT).toarray()
        kk = min(self.config.k, S.shape[1])
        if index.Xc is None:  # exact: every term is in the product
            top = largest(S, kk)
            topv = np.take_along_axis(S, top, 1)
        else:
            m = max(min(self.config.rescore, S.shape[1]), kk)
            cand = largest(S, m)
            # each candidate's weights on the common terms, against its query's
            pos, lens = row_entries(index.Xc.indptr, cand.ravel())
            pair = np.repeat(np.arange(cand.size), lens)
            qc = q[:, index.common].toarray()
            common = np.bincount(pair, weights=index.Xc.data[pos]
                                 * qc[pair // m, index.Xc.indices[pos]],
                                 minlength=cand.size).reshape(cand.shape)
            full = (np.take_along_axis(S, cand, 1) + common).astype(np.float32)
            best = np.argpartition(-full, kk - 1, axis=1)[:, :kk]
            top = np.take_along_axis(cand, best, 1)
            topv = np.take_along_axis(full, best, 1)
        order = np.argsort(-topv, axis=1)
        return np.take_along_axis(top, order, 1), np.take_along_axis(topv, order, 1)

    def _search_index(self, lang: str) -> _SearchIndex:
        """The language's `_SearchIndex`, cached: it only changes on `learn`."""
        X = self.X_[lang]
        cached = self._index.get(lang)
        if cached is None or cached.X is not X:
            XT = X.T.tocsr()
            common = common_terms(XT, self.config.prune_df)
            Xc = None
            if len(common):
                keep = np.ones(XT.shape[0], bool)
                keep[common] = False
                Xc = X[:, common].tocsr()
                XT = (sp.diags(keep.astype(XT.dtype)) @ XT).tocsr()
                XT.eliminate_zeros()
            cached = _SearchIndex(X, XT, common, Xc)
            self._index[lang] = cached
            if len(common):
                release_free_memory()  # the unpruned transpose's pages
        return cached

    def candidates(self, batch: Batch) -> Candidates:
        nbr, sims = self.neighbours(batch)
        cands, _ = vote(nbr, sims, self.memory.Y, self.config.power, self.config.top_k,
                        "tknn")
        batch.evidence[self.name] = (nbr, sims)  # for reasons and `record_neighbours`
        return cands

    def learn(self, batch: Batch, rows: np.ndarray) -> None:
        for lang, (idx, X) in batch.tfidf.items():
            if lang in self.X_:
                # rows_ grows first: a concurrent reader never sees an X_ row without one
                self.rows_[lang] = np.r_[self.rows_[lang], rows[idx]]
                self.X_[lang] = sp.vstack([self.X_[lang], X]).tocsr()
                self._index.pop(lang, None)  # stale: rebuilt on the next query

    def forget(self, rows: np.ndarray) -> None:
        """The rows' vectors become zero (one new matrix per language, swapped in at once):
        no similarity, so they are nobody's neighbour and weigh nothing in a vote."""
        for lang, X in list(self.X_.items()):
            gone = np.isin(self.rows_[lang], rows)
            if gone.any():
                X = (sp.diags((~gone).astype(X.dtype)) @ X).tocsr()
                X.eliminate_zeros()
                self.X_[lang] = X
                self._index.pop(lang, None)

    def save(self, path: Path) -> None:
        meta = {}
        for lang, X in self.X_.items():
            save_csr_atomic(path, f"tknn-{lang}", X)
            save_npy_atomic(path / f"tknn-rows-{lang}.npy", self.rows_[lang])
            meta[lang] = list(X.shape)
        write_json_atomic(path / "tknn.json", meta)
        write_json_atomic(path / "tknn-search.json",
                          {"prune_df": self.config.prune_df, "rescore": self.config.rescore})

    def load_state(self, path: Path, ctx: FitContext) -> None:
        """With ``ctx.mmap`` the record matrices stay in their files; the transposed copy
        queries use is built in memory on first use either way, so mapping saves the
        original's share."""
        self.memory = ctx.memory
        # the search the ranker learned from (a later change of the parameters would feed
        # it other neighbours than it learned on)
        search = read_json(path / "tknn-search.json")
        self.config = replace(self.config, prune_df=float(search["prune_df"]),
                              rescore=int(search["rescore"]))
        for lang, shape in read_json(path / "tknn.json").items():
            self.X_[lang] = load_csr(path, f"tknn-{lang}", tuple(shape), mmap=ctx.mmap)
            self.rows_[lang] = load_npy(path / f"tknn-rows-{lang}.npy", ctx.mmap)


@register_source
class EmbeddingNeighbours(_Voting):
    """kNN by cosine of bilingual record embeddings (across languages).

    ``index``: a `VectorIndex` kind; ``ivfsq8`` / ``ivfpq`` compress the record vectors for
    memories of millions of records (hybrid parameter ``ann_index``)."""

    name = "emb_knn"
    features = _names("eknn")
    config_class = EmbeddingNeighboursConfig
    config: EmbeddingNeighboursConfig

    def __init__(self, config: EmbeddingNeighboursConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        self.index_: VectorIndex | None = None
        self.memory = None
        self._lock = threading.Lock()  # faiss: no search while `learn` adds vectors

    def fit(self, ctx: FitContext) -> None:
        self.memory = ctx.memory
        self.index_ = VectorIndex(self.config.index).build(ctx.embeddings)

    def neighbours(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """(n × k) memory rows (−1: none) and cosines of each record's nearest records."""
        with self._lock:
            sims, nbr = self.index_.search(batch.embeddings, self.config.k)
        return nbr.astype(np.int64), sims

    def candidates(self, batch: Batch) -> Candidates:
        nbr, sims = self.neighbours(batch)
        cands, _ = vote(nbr, sims, self.memory.Y, self.config.power, self.config.top_k,
                        "eknn")
        batch.evidence[self.name] = (nbr, sims)  # for reasons and `record_neighbours`
        return cands

    def learn(self, batch: Batch, rows: np.ndarray) -> None:
        with self._lock:
            self.index_.add(batch.embeddings)

    def save(self, path: Path) -> None:
        self.index_.save(path / "index")

    def load_state(self, path: Path, ctx: FitContext) -> None:
        self.memory = ctx.memory
        dim = ctx.encoder.dim if ctx.encoder is not None else None
        self.index_ = VectorIndex.load(path / "index", dim=dim, mmap=ctx.mmap)
        if len(self.index_) != len(self.memory):
            # index rows are memory rows: another memory would vote with wrong labels
            raise ModelFormatError(f"{path / 'index'}: {len(self.index_)} record vectors, but "
                                   f"the neighbour memory holds {len(self.memory)} records; "
                                   "the index belongs to another model: retrain the project "
                                   "(tagalign train)")
