"""Record-neighbour sources: similar training records vote for their gold subjects.

score(s) = Σ_{n ∈ kNN(d), s ∈ gold(n)} sim(d, n)^p — the method that won SemEval-2025's
tib-core track. Two neighbourhoods: TF-IDF cosine within a language, and cosine of the
hybrid's bilingual embeddings (across languages).
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from tagalign.errors import ModelFormatError
from tagalign.index import VectorIndex
from tagalign.index.sparse import (
    SPARSE_SEARCHES,
    ImpactConfig,
    SparseSearch,
    row_entries,
    search_config,
)
from tagalign.io import (
    load_csr,
    load_npy,
    read_json,
    save_csr_atomic,
    save_npy_atomic,
    write_json_atomic,
)
from tagalign.params import NonNegative, NonNegativeFloat, Positive
from tagalign.suggest.sources.base import (
    MAX_REASON_ITEMS,
    Batch,
    Candidates,
    FitContext,
    Source,
    SourceConfig,
    ranks_of,
    register_source,
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


@dataclass(frozen=True)
class VotingConfig(SourceConfig):
    """What both neighbour sources take: ``k`` neighbours, each voting with its similarity
    to the power ``power``, for the ``top_k`` best subjects."""

    k: Positive = 30
    power: NonNegativeFloat = 2.0
    top_k: Positive = 50
    #: the subjects at most this many memory records carry get the pair features
    #: ``{prefix}_subject_max`` / ``_mean`` (`_Voting.score_pairs`; 0: none). Issue 66: a
    #: heading few records carry is seldom among a record's nearest neighbours though its
    #: few records may well be near, so its candidates from the other sources (the
    #: label-reading ones above all) had no neighbour evidence, right or wrong
    subject_records: NonNegative = 16


#: ``search="auto"`` takes the impact search for a memory of this many records or more and
#: the product below it: at 90,452 records the two answer about as fast (1,240 and 1,353
#: queries/s), but the product's cost grows with the records (103 queries/s at 1M against
#: the impact search's 1,019: docs/scaling.md), so a catalogue-sized training left at the
#: default would tag ten times slower than it can (issue 48)
AUTO_IMPACT_RECORDS = 200_000


def resolve_search(kind: str, records: int) -> str:
    """The search kind ``kind`` names for a memory of ``records`` records: itself, or for
    ``auto`` the product below `AUTO_IMPACT_RECORDS` and the impact search from there."""
    if kind != "auto":
        return kind
    return "impact" if records >= AUTO_IMPACT_RECORDS else "product"


@dataclass(frozen=True)
class TfidfNeighboursConfig(VotingConfig):
    """``search``: the kind of search (`tagalign.index.sparse`: ``product`` or ``impact``),
    or ``auto`` (the default: chosen by the memory's size when the source first has its
    records, `resolve_search`, and saved as the kind chosen); ``prune_df`` (product: 0 is
    the exact search), ``postings`` (impact) and ``rescore`` (both): that kind's settings,
    `search_settings`."""

    search: str = "auto"
    #: off here (issue 66): on all of train and dev, the TF-IDF evidence beside the
    #: embeddings' moved avg R@5..20 by +0.0003 and the unseen recall@20 by +0.0026 (rare
    #: −0.0001) for 0.35 ms a record, nearly what the embeddings' evidence and the label
    #: anchors cost together (0.26 + 0.17; `docs/recipes.md`)
    subject_records: NonNegative = 0
    prune_df: NonNegativeFloat = 0.05
    #: 20,000 since stop 61 (issue 48): the 1M + 1.5M-heading model tagged all dev 1.17x
    #: faster with it and Omikuji's beam at 5, dev avg R 0.5196 either way
    postings: Positive = ImpactConfig.postings
    rescore: Positive = 300

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.search != "auto":
            SPARSE_SEARCHES.lookup(self.search)  # an unknown kind: refused with the known ones

    def search_settings(self) -> dict[str, Any]:
        """The search kind's own config fields, as saved beside the model (a resolved
        kind: never ``auto``)."""
        return {"search": self.search,
                **search_config(self.search, self.values()).values()}


@dataclass(frozen=True)
class EmbeddingNeighboursConfig(VotingConfig):
    """``index``: the `VectorIndex` kind of the record vectors."""

    index: str = "ivf"


#: (pair, memory record) similarities computed at a time (`_Voting.score_pairs`)
SUBJECT_CHUNK = 16_384


class _Voting(Source):
    """What both neighbour sources share: votes of a `RecordMemory`, as reasons the
    neighbours that voted for a subject, and the per-subject evidence of the subjects few
    memory records carry (`score_pairs`)."""

    memory: RecordMemory | None
    config: VotingConfig
    #: the feature names' prefix (``tknn``, ``eknn``)
    prefix: ClassVar[str]

    def __init__(self, config: VotingConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        self.pair_features = (  # type: ignore[misc]  # by the config, not the class
            [f"{self.prefix}_subject_max", f"{self.prefix}_subject_mean"]
            if self.config.subject_records else [])
        #: the memory's labels by subject (CSC) and the label matrix it was made of
        self._by_subject: tuple[sp.csr_matrix, sp.csc_matrix] | None = None

    def subject_rows(self) -> sp.csc_matrix:
        """The memory's labels by subject (made once per label matrix: `learn` and a
        relabelling replace it, `RecordMemory`)."""
        Y = self._trained(self.memory).Y
        cached = self._by_subject
        if cached is None or cached[0] is not Y:
            cached = (Y, Y.tocsc())
            self._by_subject = cached
        return cached[1]

    def score_pairs(self, batch: Batch, rows: np.ndarray, cols: np.ndarray,
                    proxy: np.ndarray | None = None) -> np.ndarray:
        """The highest and the mean similarity of the pair's record with the memory
        records carrying its subject (``{prefix}_subject_max`` / ``_mean``), for the pairs
        whose subject at least one and at most ``subject_records`` memory records carry
        (NaN for the others, and where the source cannot compare any of those records:
        another language's, for TF-IDF). `SUBJECT_CHUNK` similarities at a time.

        Per-subject neighbour evidence for the tail (issue 66): a candidate from any
        source learns how near the record is to the few records known to carry it."""
        out = np.full((len(rows), len(self.pair_features)), np.nan, np.float32)
        if not self.pair_features or not len(rows):
            return out
        by_subject = self.subject_rows()
        counts = np.zeros(len(cols), np.int64)
        known = cols < by_subject.shape[1]
        counts[known] = np.diff(by_subject.indptr)[cols[known]]
        pairs = np.flatnonzero((counts >= 1) & (counts <= self.config.subject_records))
        step = max(1, SUBJECT_CHUNK // self.config.subject_records)
        for start in range(0, len(pairs), step):
            sel = pairs[start:start + step]
            pos, lens = row_entries(by_subject.indptr, cols[sel])
            which = np.repeat(np.arange(len(sel)), lens)
            sims = self.similarities(batch, rows[sel][which], by_subject.indices[pos])
            seen = ~np.isnan(sims)
            firsts = np.r_[0, np.cumsum(lens)[:-1]]  # each pair's records, in a run
            n = np.add.reduceat(seen.astype(np.int64), firsts)
            top = np.maximum.reduceat(np.where(seen, sims, -np.inf), firsts)
            total = np.add.reduceat(np.where(seen, sims, 0.0), firsts)
            has = n > 0
            out[sel[has], 0] = top[has]
            out[sel[has], 1] = total[has] / n[has]
        return out

    @abstractmethod
    def similarities(self, batch: Batch, rows: np.ndarray, memory_rows: np.ndarray
                     ) -> np.ndarray:
        """The similarity of each batch record ``rows[i]`` with memory record
        ``memory_rows[i]`` (NaN: not comparable), as the search measures it."""

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


@register_source
class TfidfNeighbours(_Voting):
    """kNN by TF-IDF cosine among training records of the same language.

    The search over each language's records is a `SparseSearch` of the kind ``search``
    names (`tagalign.index.sparse`), built on first use and again after `learn` or
    `forget`: ``product`` scores every record by a sparse product, in two steps with
    ``prune_df`` > 0 (issue 18: common terms leave the product, the ``rescore`` best get
    their exact cosine; ``prune_df=0`` is the exact search); ``impact`` reads a budget of
    ``postings`` per query from an impact-ordered inverted index and rescores the
    ``rescore`` best exactly, a cost bounded by the budget, not the records (issue 48).
    The kind and its settings are saved beside the model and win over the recipe's at load
    (the ranker learned from that search's neighbours); an ``impact`` index is saved too."""

    name = "tfidf_knn"
    prefix = "tknn"
    features = _names(prefix)
    config_class = TfidfNeighboursConfig
    config: TfidfNeighboursConfig

    def __init__(self, config: TfidfNeighboursConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        self.X_: dict[str, sp.csr_matrix] = {}
        self.rows_: dict[str, np.ndarray] = {}  # memory row of each X_ row
        self._index: dict[str, SparseSearch] = {}
        self._at: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # `_memory_rows`
        self.memory = None

    def fit(self, ctx: FitContext) -> None:
        self.memory = ctx.memory
        for lang, (idx, X) in ctx.tfidf.items():
            self.X_[lang] = X.tocsr()
            self.rows_[lang] = np.asarray(idx, np.int64)
        self._resolve_search()

    def _resolve_search(self) -> None:
        """Pin ``auto`` to the kind the memory's records call for (`resolve_search`), once:
        the ranker learns from that kind's neighbours, so records learned later never
        switch it."""
        if self.config.search == "auto":
            records = sum(X.shape[0] for X in self.X_.values())
            self.config = replace(self.config,
                                  search=resolve_search("auto", records))

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
                top, topv = index.search(Xq[start:start + QUERY_CHUNK], k)
                nbr[part, :top.shape[1]] = self.rows_[lang][top]
                sims[part, :top.shape[1]] = topv
        return nbr, sims

    def similarities(self, batch: Batch, rows: np.ndarray, memory_rows: np.ndarray
                     ) -> np.ndarray:
        """TF-IDF cosines of the batch's records with memory records of their language
        (NaN: another language's, as the search never compares them)."""
        out = np.full(len(rows), np.nan, np.float32)
        for lang, (idx, Xq) in batch.tfidf.items():
            if lang not in self.X_:
                continue
            at_q = np.full(len(batch), -1, np.int64)
            at_q[idx] = np.arange(len(idx))
            at_x = self._memory_rows(lang)
            q = at_q[rows]
            x = np.full(len(rows), -1, np.int64)
            inside = memory_rows < len(at_x)
            x[inside] = at_x[memory_rows[inside]]
            ok = np.flatnonzero((q >= 0) & (x >= 0))
            if len(ok):
                out[ok] = np.asarray(Xq[q[ok]].multiply(self.X_[lang][x[ok]]).sum(axis=1)
                                     ).ravel()
        return out

    def _memory_rows(self, lang: str) -> np.ndarray:
        """Per memory row, its row in the language's matrix (−1: another language's),
        made once per row list (`learn` replaces it)."""
        rows = self.rows_[lang]
        cached = self._at.get(lang)
        if cached is None or cached[0] is not rows:
            at = np.full(int(rows.max(initial=-1)) + 1, -1, np.int64)
            at[rows] = np.arange(len(rows))
            cached = (rows, at)
            self._at[lang] = cached
        return cached[1]

    def _search_index(self, lang: str) -> SparseSearch:
        """The language's search, cached: it only changes on `learn` and `forget`."""
        X = self.X_[lang]
        cached = self._index.get(lang)
        if cached is None or cached.X is not X:
            self._resolve_search()
            kind = SPARSE_SEARCHES.lookup(self.config.search)
            cached = kind(X, search_config(self.config.search, self.config.values()))
            self._index[lang] = cached
        return cached

    def candidates(self, batch: Batch) -> Candidates:
        nbr, sims = self.neighbours(batch)
        cands, _ = vote(nbr, sims, self._trained(self.memory).Y, self.config.power,
                        self.config.top_k, self.prefix)
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
        self._resolve_search()
        meta = {}
        for lang, X in self.X_.items():
            save_csr_atomic(path, f"tknn-{lang}", X)
            save_npy_atomic(path / f"tknn-rows-{lang}.npy", self.rows_[lang])
            meta[lang] = list(X.shape)
            if self.config.search != "product":  # product: nothing beyond X, built at load
                folder = path / f"tknn-{self.config.search}-{lang}"
                folder.mkdir(exist_ok=True)
                self._search_index(lang).save(folder)
        write_json_atomic(path / "tknn.json", meta)
        write_json_atomic(path / "tknn-search.json", self.config.search_settings())

    def load_state(self, path: Path, ctx: FitContext) -> None:
        """With ``ctx.mmap`` the record matrices (and an impact index) stay in their files;
        the product search's transposed copy is built in memory on first use either way."""
        self.memory = ctx.memory
        # the search the ranker learned from (a later change of the parameters would feed
        # it other neighbours than it learned on); files written before issue 48 hold
        # prune_df and rescore: the product search, the only kind then
        search = read_json(path / "tknn-search.json")
        kind = search.get("search", "product")
        if kind not in SPARSE_SEARCHES:
            raise ModelFormatError(f"{path / 'tknn-search.json'}: unknown search {kind!r}; "
                                   f"this version knows {SPARSE_SEARCHES.names()}: retrain "
                                   "the project (tagalign train)")
        config = SPARSE_SEARCHES[kind].config_class
        self.config = replace(self.config, search=kind, **{
            name: type(getattr(self.config, name))(search[name])
            for name in config.field_names()})
        for lang, shape in read_json(path / "tknn.json").items():
            X = load_csr(path, f"tknn-{lang}", tuple(shape), mmap=ctx.mmap)
            self.rows_[lang] = load_npy(path / f"tknn-rows-{lang}.npy", ctx.mmap)
            self.X_[lang] = X
            if kind != "product":
                self._index[lang] = SPARSE_SEARCHES[kind].load(
                    path / f"tknn-{kind}-{lang}", X, search_config(kind, self.config.values()),
                    mmap=ctx.mmap)


@register_source
class EmbeddingNeighbours(_Voting):
    """kNN by cosine of bilingual record embeddings (across languages).

    ``index``: a `VectorIndex` kind; ``ivfsq8`` / ``ivfpq`` compress the record vectors for
    memories of millions of records (hybrid parameter ``ann_index``)."""

    name = "emb_knn"
    prefix = "eknn"
    features = _names(prefix)
    config_class = EmbeddingNeighboursConfig
    fits_on_embeddings = True
    config: EmbeddingNeighboursConfig

    def __init__(self, config: EmbeddingNeighboursConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        self.index_: VectorIndex | None = None
        self.memory = None
        self._lock = threading.Lock()  # faiss: no search while `learn` adds vectors

    def fit(self, ctx: FitContext) -> None:
        self.memory = ctx.memory
        self.index_ = VectorIndex(self.config.index).build(self._embeddings(ctx))

    def similarities(self, batch: Batch, rows: np.ndarray, memory_rows: np.ndarray
                     ) -> np.ndarray:
        """Cosines of the batch's records with memory records, their vectors read back
        from the index (no second copy)."""
        with self._lock:
            vecs = self._trained(self.index_).rows(memory_rows)
        return np.einsum("ij,ij->i", self._embeddings(batch)[rows], vecs)

    def neighbours(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """(n × k) memory rows (−1: none) and cosines of each record's nearest records."""
        with self._lock:
            sims, nbr = self._trained(self.index_).search(self._embeddings(batch), self.config.k)
        return nbr.astype(np.int64), sims

    def candidates(self, batch: Batch) -> Candidates:
        nbr, sims = self.neighbours(batch)
        cands, _ = vote(nbr, sims, self._trained(self.memory).Y, self.config.power,
                        self.config.top_k, self.prefix)
        batch.evidence[self.name] = (nbr, sims)  # for reasons and `record_neighbours`
        return cands

    def learn(self, batch: Batch, rows: np.ndarray) -> None:
        with self._lock:
            self._trained(self.index_).add(self._embeddings(batch))

    def save(self, path: Path) -> None:
        self._trained(self.index_).save(path / "index")

    def load_state(self, path: Path, ctx: FitContext) -> None:
        self.memory = ctx.memory
        dim = ctx.encoder.dim if ctx.encoder is not None else None
        self.index_ = VectorIndex.load(path / "index", dim=dim, mmap=ctx.mmap)
        memory = self._trained(self.memory)
        if len(self.index_) != len(memory):
            # index rows are memory rows: another memory would vote with wrong labels
            raise ModelFormatError(f"{path / 'index'}: {len(self.index_)} record vectors, but "
                                   f"the neighbour memory holds {len(memory)} records; "
                                   "the index belongs to another model: retrain the project "
                                   "(tagalign train)")
