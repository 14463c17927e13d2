"""Top-k cosine search over L2-normalised sparse rows (the TF-IDF records of ``tfidf_knn``).

Two registered kinds (`SPARSE_SEARCHES`), each with its own typed config:

- ``product`` (`ProductSearch`): the query rows times the transposed records, every record
  scored; with ``prune_df`` > 0 in two steps (issue 18): the terms of more than that share
  of the records leave the product, and the ``rescore`` best get their exact cosine. Its
  cost grows with the records (a dense chunk × N block per query chunk).
- ``impact`` (`ImpactSearch`): an inverted index whose postings are ordered by weight,
  read score-at-a-time with a budget of ``postings`` per query (early termination), then
  the ``rescore`` best candidates get their exact cosine: a cost bounded by the budget,
  not the records (issue 48).

Both return, for a CSR block of query rows, the positions of the k best records in the
matrix ``X`` and their cosines (exact for what is returned), best first.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from tagalign.errors import ModelFormatError
from tagalign.io import load_npy, read_json, save_npy_atomic, write_json_atomic
from tagalign.params import NonNegativeFloat, PartConfig, Positive
from tagalign.registry import Registry
from tagalign.runtime import release_free_memory

SPARSE_SEARCHES: Registry[type[SparseSearch]] = Registry("TF-IDF neighbour search")
register_search = SPARSE_SEARCHES.register


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


def common_terms(XT: sp.csr_matrix, prune_df: float) -> np.ndarray:
    """Terms in more than ``prune_df`` of the records (0: none)."""
    if prune_df <= 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.diff(XT.indptr) > prune_df * XT.shape[1])


def best_first(top: np.ndarray, topv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-topv, axis=1)
    return np.take_along_axis(top, order, 1), np.take_along_axis(topv, order, 1)


def exact_cosines(X: sp.csr_matrix, q: sp.csr_matrix, cand: np.ndarray) -> np.ndarray:
    """(n × m) cosines of query row i with the records ``cand[i]``: the candidates' rows
    gathered once, their terms mapped into one small dense block of the queries' terms
    (never a vocabulary- or records-wide row), summed by one sparse product."""
    n, m = cand.shape
    Xc = X[cand.ravel()]
    terms, inv = np.unique(q.indices, return_inverse=True)
    u = len(terms)
    # int32 where it fits: these arrays hold every candidate's terms (millions per block)
    dtype = np.int32 if n * (u + 1) < 2**31 else np.int64
    slot = np.full(X.shape[1], u, dtype)  # terms no query of the block has: the zero slot
    slot[terms] = np.arange(u)
    dense = np.zeros((n, u + 1), np.float32)
    dense[np.repeat(np.arange(n), np.diff(q.indptr)), inv] = q.data
    per_query = np.diff(Xc.indptr[::m]) if m else np.zeros(n, np.int64)
    cols = slot[Xc.indices]
    cols += np.repeat(np.arange(n, dtype=dtype) * (u + 1), per_query)
    M = sp.csr_matrix((Xc.data, cols, Xc.indptr), shape=(n * m, n * (u + 1)))
    return (M @ dense.ravel()).reshape(n, m).astype(np.float32)


class SparseSearch(ABC):
    """One kind of search over the records ``X`` (records × terms, rows L2-normalised),
    built from them at once; ``config``: the kind's `PartConfig`."""

    name: ClassVar[str]
    config_class: ClassVar[type[PartConfig]]

    def __init__(self, X: sp.csr_matrix, config: PartConfig):
        self.X = X
        self.config = config

    @abstractmethod
    def search(self, q: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best records of each query row (positions in ``X``, best first) and
        their cosines; fewer than k found: the rest have cosine 0."""

    def nbytes(self) -> int:
        """Bytes of what the search holds beside ``X``."""
        return 0

    def save(self, folder: Path) -> None:  # noqa: B027 - kinds built at load save nothing
        """Write what `load` reads back into ``folder`` (made by the caller)."""

    @classmethod
    def load(cls, folder: Path, X: sp.csr_matrix, config: PartConfig, mmap: bool = False
             ) -> SparseSearch:
        """The search over ``X`` that `save` wrote (kinds that save nothing: built now)."""
        return cls(X, config)


@dataclass(frozen=True)
class ProductConfig(PartConfig):
    """``prune_df``: the share of records above which a term leaves the product (0: the
    exact search); ``rescore``: the records given their exact cosine after it."""

    prune_df: NonNegativeFloat = 0.0
    rescore: Positive = 300
    kind: ClassVar[str] = "search"


@register_search
class ProductSearch(SparseSearch):
    """Every record scored by one sparse product per query chunk. A query shares a term
    found in more than 5 % of the records with most of them, so its exact similarities are
    nearly dense and their product costs the most. With ``prune_df`` > 0 the product
    leaves those common terms out (``XT``); the ``rescore`` records it ranks highest get
    their exact cosine, the common terms' part added back from a small records × common
    terms matrix (``Xc``). It misses a neighbour only when common terms alone would have
    lifted it into the top k. On 1,000 seeded dev records, with a 5 % cut and 300
    rescored, the neighbours found hold 99.9 % (German) and 99.4 % (English) of the exact
    search's vote weight (similarity²), in 0.72 s instead of 1.36."""

    name = "product"
    config_class = ProductConfig
    config: ProductConfig

    def __init__(self, X: sp.csr_matrix, config: ProductConfig):
        super().__init__(X, config)
        XT = X.T.tocsr()
        self.common = common_terms(XT, config.prune_df)
        self.Xc: sp.csr_matrix | None = None
        if len(self.common):
            keep = np.ones(XT.shape[0], bool)
            keep[self.common] = False
            self.Xc = X[:, self.common].tocsr()
            XT = (sp.diags(keep.astype(XT.dtype)) @ XT).tocsr()
            XT.eliminate_zeros()
            release_free_memory()  # the unpruned transpose's pages
        self.XT = XT

    def nbytes(self) -> int:
        parts = [self.XT] + ([self.Xc] if self.Xc is not None else [])
        return sum(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes for m in parts)

    def search(self, q: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
        S = (q @ self.XT).toarray()
        kk = min(k, S.shape[1])
        if self.Xc is None:  # exact: every term is in the product
            top = largest(S, kk)
            return best_first(top, np.take_along_axis(S, top, 1))
        m = max(min(self.config.rescore, S.shape[1]), kk)
        cand = largest(S, m)
        # each candidate's weights on the common terms, against its query's
        pos, lens = row_entries(self.Xc.indptr, cand.ravel())
        pair = np.repeat(np.arange(cand.size), lens)
        qc = q[:, self.common].toarray()
        common = np.bincount(pair, weights=self.Xc.data[pos]
                             * qc[pair // m, self.Xc.indices[pos]],
                             minlength=cand.size).reshape(cand.shape)
        full = (np.take_along_axis(S, cand, 1) + common).astype(np.float32)
        best = np.argpartition(-full, kk - 1, axis=1)[:, :kk]
        return best_first(np.take_along_axis(cand, best, 1),
                          np.take_along_axis(full, best, 1))


def row_entries(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in a CSR matrix's ``indices``/``data`` of every entry of ``rows`` (in that
    order, a row repeated as often as it is given) and each row's entry count: the rows'
    stored entries gathered with NumPy, without a per-row loop or scipy's fancy indexing."""
    rows = np.asarray(rows, np.int64)
    starts = indptr[rows].astype(np.int64)
    lens = indptr[rows + 1].astype(np.int64) - starts
    return spans(starts, lens), lens


def spans(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The positions ``starts[i]``, …, ``starts[i] + lens[i] - 1`` of every i, concatenated
    (with NumPy, no per-span loop)."""
    offsets = np.cumsum(lens) - lens
    return np.repeat(starts - offsets, lens) + np.arange(int(lens.sum()))


@dataclass(frozen=True)
class ImpactConfig(PartConfig):
    """``postings``: the postings read per query (the budget); ``rescore``: the best
    candidates by their partial score that get their exact cosine."""

    postings: Positive = 20_000
    rescore: Positive = 1000
    kind: ClassVar[str] = "search"


#: bisection steps on log θ (the contribution threshold) per query block
BISECTION_STEPS = 16


@register_search
class ImpactSearch(SparseSearch):
    """Score-at-a-time search of an impact-ordered inverted index, with early termination
    (anytime ranking: Lin & Trotman, ICTIR 2015, as JASS does it).

    Each term's postings are sorted by weight, highest first. A query reads, of each of its
    terms t, the postings whose contribution q_t·x_dt reaches one threshold θ — the
    ``postings`` largest contributions of the whole query, θ found per query by bisection
    (each term's depth at a weight is read off a table of its weights at depths 1, √2, 2,
    …, so the budget is kept to a factor √2 per term). Those contributions are summed per
    record (sparse: only records read get a score), and the ``rescore`` records with the
    highest partial scores get their exact cosine; the best k of them are returned. With a
    budget of at least the query's postings every score is exact, so with ``rescore`` ≥ the
    records it is the exact search. Cost per query: the budget plus ``rescore`` rows, not
    the records (figures at 90k and 1M records: docs/scaling.md, from
    `benchmarks/speed/tfidf_search.py --sizes`)."""

    name = "impact"
    config_class = ImpactConfig
    config: ImpactConfig

    def __init__(self, X: sp.csr_matrix, config: ImpactConfig,
                 arrays: dict[str, np.ndarray] | None = None):
        super().__init__(X, config)
        self.indptr, self.indices, self.data, self.levels = (
            (arrays["indptr"], arrays["indices"], arrays["data"], arrays["levels"])
            if arrays is not None else self._build(X))
        self.df = np.diff(self.indptr)
        self.depths = level_depths(X.shape[0])

    @staticmethod
    def _build(X: sp.csr_matrix) -> tuple[np.ndarray, ...]:
        XT = X.T.tocsr()
        df = np.diff(XT.indptr)
        # within each term, weight descending (ties: record order): one stable sort on
        # term + (1 − weight)/2, which stays inside [term, term + ½)
        key = np.repeat(np.arange(XT.shape[0], dtype=np.float64), df)
        key += (1.0 - XT.data.astype(np.float64)) / 2
        order = np.argsort(key, kind="stable")
        del key
        indptr = XT.indptr.astype(np.int64)
        indices = XT.indices[order].astype(np.int32)
        data = XT.data[order].astype(np.float32)
        del XT, order
        release_free_memory()
        depth = np.minimum(level_depths(X.shape[0])[None, :], np.maximum(df, 1)[:, None])
        at = np.minimum(indptr[:-1, None] + depth - 1, max(len(data) - 1, 0))
        levels = np.where(df[:, None] > 0, data[at] if len(data) else 0, 0).astype(np.float32)
        return indptr, indices, data, levels

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.indptr, self.indices, self.data, self.levels))

    def _depths(self, levels: np.ndarray, df: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Postings of each (query, term) pair with a weight ≥ ``weight``, at level steps."""
        reached = (levels >= weight[:, None]).sum(1)
        return np.where(reached > 0, np.minimum(self.depths[np.maximum(reached - 1, 0)], df), 0)

    def read_depths(self, q: sp.csr_matrix) -> np.ndarray:
        """How many postings of each stored query entry are read (the budget spent on
        the highest contributions)."""
        n = q.shape[0]
        qrow = np.repeat(np.arange(n), np.diff(q.indptr))
        terms = q.indices.astype(np.int64)
        levels, df, qv = self.levels[terms], self.df[terms], q.data.astype(np.float64)
        budget = self.config.postings
        everything = np.bincount(qrow, weights=df, minlength=n) <= budget
        lo, hi = np.full(n, -20.0), np.zeros(n)  # log θ: contributions are ≤ 1
        for _ in range(BISECTION_STEPS):
            mid = (lo + hi) / 2
            spent = np.bincount(qrow, weights=self._depths(levels, df, np.exp(mid)[qrow] / qv),
                                minlength=n)
            over = spent > budget
            lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
        return np.where(everything[qrow], df, self._depths(levels, df, np.exp(hi)[qrow] / qv))

    def search(self, q: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
        n, N = q.shape[0], self.X.shape[0]
        kk = min(k, N)
        depth = self.read_depths(q)
        # the read postings as one (query entries × records) matrix, summed per query by
        # one sparse product: accumulators only for the records read
        pos = spans(self.indptr[q.indices], depth)  # the first `depth` postings of each term
        read = sp.csr_matrix((self.data[pos] * np.repeat(q.data, depth), self.indices[pos],
                              np.r_[0, np.cumsum(depth)]), shape=(len(depth), N))
        pick = sp.csr_matrix((np.ones(len(depth), np.float32), np.arange(len(depth)),
                              q.indptr), shape=(n, len(depth)))
        partial = (pick @ read).tocsr()
        m = max(min(self.config.rescore, N), kk)
        cand = np.zeros((n, m), np.int64)
        found = np.zeros((n, m), bool)
        for i in range(n):
            a, b = partial.indptr[i], partial.indptr[i + 1]
            best = np.argpartition(-partial.data[a:b], m - 1)[:m] if b - a > m else \
                np.arange(b - a)
            cand[i, :len(best)] = partial.indices[a:b][best]
            found[i, :len(best)] = True
        full = np.where(found, exact_cosines(self.X, q, cand), -1.0).astype(np.float32)
        top = np.argpartition(-full, kk - 1, axis=1)[:, :kk]
        top, topv = best_first(np.take_along_axis(cand, top, 1), np.take_along_axis(full, top, 1))
        return top, np.maximum(topv, 0)

    def save(self, folder: Path) -> None:
        for name in ("indptr", "indices", "data", "levels"):
            save_npy_atomic(folder / f"{name}.npy", getattr(self, name))
        write_json_atomic(folder / "impact.json", {"records": self.X.shape[0],
                                                   "terms": self.X.shape[1],
                                                   "postings": int(len(self.data))})

    @classmethod
    def load(cls, folder: Path, X: sp.csr_matrix, config: PartConfig, mmap: bool = False
             ) -> ImpactSearch:
        """Refuses an index of other records than ``X`` (its size or postings differ)."""
        meta = read_json(folder / "impact.json")
        have = {"records": X.shape[0], "terms": X.shape[1], "postings": int(X.nnz)}
        if {key: meta.get(key) for key in have} != have:
            raise ModelFormatError(
                f"{folder}: an impact index of {meta.get('records')} records × "
                f"{meta.get('terms')} terms ({meta.get('postings')} postings), but the "
                f"TF-IDF records are {have['records']} × {have['terms']} ({have['postings']}); "
                "the index belongs to another model: retrain the project (tagalign train)")
        arrays = {name: load_npy(folder / f"{name}.npy", mmap)
                  for name in ("indptr", "indices", "data", "levels")}
        if len(arrays["indptr"]) != X.shape[1] + 1 or len(arrays["data"]) != X.nnz or \
                arrays["levels"].shape != (X.shape[1], len(level_depths(X.shape[0]))):
            raise ModelFormatError(f"{folder}: the index files do not match impact.json; "
                                   "retrain the project (tagalign train)")
        if not isinstance(config, ImpactConfig):
            raise TypeError(f"an impact index takes an ImpactConfig, not {type(config).__name__}")
        return cls(X, config, arrays)


def level_depths(records: int) -> np.ndarray:
    """The depths at which `ImpactSearch` keeps each term's weight: 1, √2, 2, … rounded, up
    to past ``records``."""
    steps = np.sqrt(2.0) ** np.arange(0, 2 * np.log2(max(records, 2)) + 2)
    return np.unique(np.round(steps).astype(np.int64))


def search_config(kind: str, settings: dict[str, Any]) -> PartConfig:
    """The config of search ``kind`` from ``settings`` (fields it does not have ignored)."""
    cls = SPARSE_SEARCHES.lookup(kind).config_class
    return cls(**{name: settings[name] for name in cls.field_names() if name in settings})
