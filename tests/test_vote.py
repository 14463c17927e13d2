"""The neighbour vote (NumPy sums over gold subjects) equals its sparse-product definition:
score(s) = Σ sim(d, n)^p over neighbours n holding s, top-k by score, ties by subject."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tagalign.suggest.sources.base import ranks_of, topk_per_row
from tagalign.suggest.sources.neighbours import vote


def reference(nbr, sims, Y, power, top_k):
    """The definition as sparse products (the implementation before issue 23)."""
    n, k = nbr.shape
    valid = (nbr >= 0) & (sims > 0)
    rows = np.repeat(np.arange(n), k)[valid.ravel()]
    cols = nbr.ravel()[valid.ravel()]
    w = np.power(sims.ravel()[valid.ravel()], power)
    W = sp.csr_matrix((w, (rows, cols)), shape=(n, Y.shape[0]))
    # summed in double precision and then rounded to float32, as `vote` does: summed in
    # float32, two equal sums could differ in their last bit and swap a tie (a failure
    # Hypothesis found)
    S = (W.astype(np.float64) @ Y.astype(np.float64)).tocsr()
    S.data = S.data.astype(np.float32)
    Wb = W.copy()
    Wb.data[:] = 1.0
    C = (Wb @ Y).tocsr()
    r, c, v = topk_per_row(S, top_k)
    counts = np.asarray(C[r, c]).ravel() if len(r) else np.zeros(0, np.float32)
    total = np.asarray(W.sum(axis=1)).ravel()
    return r, c, np.column_stack([v, v / np.maximum(total[r], 1e-9), counts, ranks_of(r),
                                  sims[:, 0][r]])


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 6), k=st.integers(1, 8),
       top_k=st.integers(1, 12), power=st.sampled_from([1.0, 2.0, 3.0]))
def test_vote_matches_sparse_definition(seed, n, k, top_k, power):
    rng = np.random.default_rng(seed)
    memory, subjects = 15, 20
    Y = sp.random(memory, subjects, density=0.15, random_state=seed, format="csr",
                  dtype=np.float32)
    Y.data[:] = 1.0
    # distinct neighbours per record (as a kNN returns), some rows padded with -1
    nbr = np.array([rng.permutation(memory)[:k] for _ in range(n)])
    nbr[::2, k // 2:] = -1
    sims = np.sort(rng.choice([0.0, 0.25, 0.5, 0.9, *rng.random(4)], size=(n, k)),
                   axis=1)[:, ::-1].astype(np.float32)
    cands, _ = vote(nbr, sims, Y, power, top_k, "x")
    r, c, feats = reference(nbr, sims, Y, power, top_k)
    assert cands.rows.tolist() == r.tolist()
    assert cands.cols.tolist() == c.tolist()
    np.testing.assert_allclose(cands.feats, feats, rtol=1e-6, atol=1e-7)


def test_vote_worked_example():
    # two neighbours: memory row 0 (subjects 1, 2) at 0.5, row 1 (subject 2) at 1.0
    Y = sp.csr_matrix(np.array([[0, 1, 1], [0, 0, 1]], np.float32))
    cands, _ = vote(np.array([[1, 0]]), np.array([[1.0, 0.5]], np.float32), Y, 2.0, 5, "x")
    assert cands.cols.tolist() == [2, 1]
    np.testing.assert_allclose(cands.feats, [[1.25, 1.0, 2, 1, 1.0], [0.25, 0.2, 1, 2, 1.0]])
