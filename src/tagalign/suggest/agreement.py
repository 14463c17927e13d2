"""Features that say how a candidate agrees with the record's other strong candidates.

Subjects are assigned together: a record on medieval German epics gets "Epos", "Mittelhoch-
deutsch" and "Literatur" more often than any of them with "Halbleiter". Each source ranks
its candidates alone; these features tell the ranker whether a candidate is one the
record's other likely subjects are often assigned with (issue 18: co-assignment of subject
pairs in training, against the other top candidates).

A record's *anchors* are its ``top_m`` candidates by reciprocal-rank fusion of the sources'
own ranks (RRF, Cormack et al. 2009: Σ 1/(60 + rank)), a cheap first pass that needs no
model. For a candidate c and the anchors A (without c itself):

* ``co_sum``  = Σ_{a∈A} P(c | a), the conditional co-assignment rates from training
* ``co_hits`` = how many anchors were ever assigned together with c
* ``co_max``  = max_{a∈A} P(c | a), 0 when none co-occurs (with the ``prior`` feature, the
  log frequency of c, the trees have the best anchor's PMI: log P(c | a) / P(c))

Computed as sparse products (anchors × co-assignment matrix), not per pair in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tagalign.suggest.sources.base import ranks_of

AGREEMENT_FEATURES = ["co_sum", "co_hits", "co_max"]
RRF_K = 60.0


def rrf(X: np.ndarray, names: list[str]) -> np.ndarray:
    """Reciprocal-rank fusion of every ``*_rank`` column (a source's missing rank adds 0);
    a source without ranks (lexical matches) counts as rank 1 where it proposed."""
    score = np.zeros(len(X), np.float64)
    for j, name in enumerate(names):
        if name.endswith("_rank"):
            r = X[:, j]
            score += np.where(np.isnan(r), 0.0, 1.0 / (RRF_K + np.nan_to_num(r, nan=1.0)))
        elif name == "lex_count":
            score += np.where(np.isnan(X[:, j]), 0.0, 1.0 / (RRF_K + 1.0))
    return score


@dataclass
class CoAssignment:
    """Co-assignment statistics of subject pairs among training records."""

    #: P(c | a) as CSR, row a, column c (the diagonal is dropped)
    cond: sp.csr_matrix

    @classmethod
    def from_labels(cls, Y: sp.csr_matrix) -> CoAssignment:
        Y = sp.csr_matrix(Y, dtype=np.float32)
        Y.data[:] = 1.0
        C = (Y.T @ Y).tocsr()
        C.setdiag(0)
        C.eliminate_zeros()
        count = np.asarray(Y.sum(axis=0)).ravel()
        rows = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
        C.data = (C.data / count[rows]).astype(np.float32)
        C.indices = C.indices.astype(np.int32)
        C.indptr = C.indptr.astype(np.int64)
        return cls(C)

    def _ones(self) -> sp.csr_matrix:
        """``cond``'s pattern with ones (co-assigned or not), built once."""
        ones = self.__dict__.get("_ones_matrix")
        if ones is None or ones.nnz != self.cond.nnz:
            ones = sp.csr_matrix((np.ones(self.cond.nnz, np.float32), self.cond.indices,
                                  self.cond.indptr), shape=self.cond.shape)
            self.__dict__["_ones_matrix"] = ones
        return ones

    def features(self, rows: np.ndarray, cols: np.ndarray, proxy: np.ndarray, n_rows: int,
                 top_m: int = 10) -> np.ndarray:
        """(n, 3) `AGREEMENT_FEATURES` of the candidates (rows, cols), anchors by ``proxy``."""
        if len(rows) == 0:
            return np.zeros((0, len(AGREEMENT_FEATURES)), np.float32)
        order = np.lexsort((-proxy, rows))
        rank = np.empty(len(rows), np.float32)
        rank[order] = ranks_of(rows[order])
        top = rank <= top_m
        n_subj = self.cond.shape[0]
        anchors = sp.csr_matrix((np.ones(int(top.sum()), np.float32), (rows[top], cols[top])),
                                shape=(n_rows, n_subj))
        co_sum = _gather(anchors @ self.cond, rows, cols)
        co_hits = _gather(anchors @ self._ones(), rows, cols)
        co_max = _gather_max(anchors, self.cond, rows, cols)
        return np.column_stack([co_sum, co_hits, co_max]).astype(np.float32)


def _gather(M: sp.spmatrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return np.asarray(M.tocsr()[rows, cols]).ravel()


def _gather_max(anchors: sp.csr_matrix, pmi: sp.csr_matrix, rows: np.ndarray,
                cols: np.ndarray) -> np.ndarray:
    """max over each row's anchors a of pmi[a, c] (any CSR matrix of subject pairs), for
    every candidate (r, c); 0 if none."""
    n_subj = pmi.shape[1]
    # every (record, anchor) pair expanded to the anchor's co-assigned subjects
    a_rows = np.repeat(np.arange(anchors.shape[0]), np.diff(anchors.indptr))
    a_subj = anchors.indices
    lens = np.diff(pmi.indptr)[a_subj]
    starts = pmi.indptr[a_subj]
    offsets = np.cumsum(lens) - lens
    pos = np.repeat(starts - offsets, lens) + np.arange(int(lens.sum()))
    keys = np.repeat(a_rows, lens).astype(np.int64) * n_subj + pmi.indices[pos]
    vals = pmi.data[pos]
    order = np.lexsort((-vals, keys))  # per key, the largest first
    keys, vals = keys[order], vals[order]
    first = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.zeros(0, bool)
    keys, vals = keys[first], vals[first]
    q = rows.astype(np.int64) * n_subj + cols
    i = np.searchsorted(keys, q)
    i = np.minimum(i, max(len(keys) - 1, 0))
    hit = (keys[i] == q) if len(keys) else np.zeros(len(q), bool)
    return np.where(hit, vals[i] if len(keys) else 0.0, 0.0).astype(np.float32)
