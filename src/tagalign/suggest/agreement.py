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

Computed with NumPy over the anchors' co-assignment lists (`CoAssignment.features`), not
per pair in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tagalign.index.sparse import row_entries
from tagalign.io import load_csr, read_json, save_csr_atomic, write_json_atomic
from tagalign.suggest.sources.base import anchor_mask

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
    #: how many of a record's strongest candidates are its anchors
    top_m: int = 10

    @classmethod
    def from_labels(cls, Y: sp.csr_matrix, top_m: int = 10) -> CoAssignment:
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
        return cls(C, top_m)

    def widened(self, n_subjects: int) -> CoAssignment:
        """Of ``n_subjects`` subjects: the ones a vocabulary update appended were never
        assigned with any other (empty rows and columns)."""
        n = self.cond.shape[0]
        if n >= n_subjects:
            return self
        indptr = np.concatenate([np.asarray(self.cond.indptr, np.int64),
                                 np.full(n_subjects - n, self.cond.indptr[-1], np.int64)])
        cond = sp.csr_matrix((np.asarray(self.cond.data), np.asarray(self.cond.indices),
                              indptr), shape=(n_subjects, n_subjects))
        return CoAssignment(cond, self.top_m)

    def without(self, withheld: np.ndarray) -> CoAssignment:
        """As if no training record had carried the ``withheld`` subjects (a boolean per
        subject): their rows and columns emptied (`HybridPipeline.blinded`)."""
        keep = sp.diags((~withheld[:self.cond.shape[0]]).astype(np.float32))
        cond = (keep @ self.cond @ keep).tocsr()
        cond.eliminate_zeros()
        cond.indices = cond.indices.astype(np.int32)
        cond.indptr = cond.indptr.astype(np.int64)
        return CoAssignment(cond, self.top_m)

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        save_csr_atomic(path, "cond", self.cond)
        write_json_atomic(path / "co.json", {"shape": list(self.cond.shape), "top_m": self.top_m})

    @classmethod
    def load(cls, path: Path, mmap: bool = False) -> CoAssignment:
        meta = read_json(path / "co.json")
        return cls(load_csr(path, "cond", tuple(meta["shape"]), mmap=mmap), meta["top_m"])

    def features(self, rows: np.ndarray, cols: np.ndarray, proxy: np.ndarray, n_rows: int,
                 top_m: int | None = None) -> np.ndarray:
        """(n, 3) `AGREEMENT_FEATURES` of the candidates (rows, cols), anchors by ``proxy``.

        A record at a time: its candidates are marked in a subject-sized array, each of its
        anchors' co-assignment lists is gathered once and looked up in the marks, and the
        hits are summed, counted and maxed per candidate, the anchors in candidate order.
        One record's lookups stay in the marks (the cache) where a batch-wide search of
        every listed pair did not: against the 1M-record training's co-assignments, whose
        frequent subjects list up to 27,000 partners, 0.3 ms a record where sorting and
        searching the batch's pairs took 1.7 (issue 48; the same features, bit for bit)."""
        n = len(rows)
        out = np.zeros((n, len(AGREEMENT_FEATURES)), np.float32)
        if n == 0:
            return out
        rows = np.asarray(rows, np.int64)
        is_anchor = anchor_mask(rows, proxy, self.top_m if top_m is None else top_m)
        by_row = np.argsort(rows, kind="stable")  # each record's candidates, in order
        bounds = np.searchsorted(rows[by_row], np.arange(n_rows + 1))
        mark = np.full(self.cond.shape[1], -1, np.int64)  # subject → candidate, or -1
        hits, vals = [], []
        for r in np.flatnonzero(np.diff(bounds)):
            mine = by_row[bounds[r]:bounds[r + 1]]
            mark[cols[mine]] = mine
            pos, _ = row_entries(self.cond.indptr, cols[mine[is_anchor[mine]]])
            cand = mark[self.cond.indices[pos]]
            hit = cand >= 0
            hits.append(cand[hit])
            vals.append(self.cond.data[pos[hit]])
            mark[cols[mine]] = -1
        i, v = np.concatenate(hits), np.concatenate(vals)
        out[:, 0] = np.bincount(i, weights=v, minlength=n)
        out[:, 1] = np.bincount(i, minlength=n)
        np.maximum.at(out[:, 2], i, v)
        return out
