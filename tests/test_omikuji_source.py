"""Omikuji predictions through our C call equal the library's own `Model.predict`."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from tagalign.suggest.sources import omikuji as om


def _data(seed: int = 0) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    n, d, labels = 240, 60, 12
    Y = sp.csr_matrix((rng.random((n, labels)) < 0.15).astype(np.float32))
    W = rng.random((labels, d)).astype(np.float32)
    # features that say something of the labels, plus noise
    dense = (Y @ W) * (rng.random((n, d)) < 0.3) + (rng.random((n, d)) < 0.05)
    X = sp.csr_matrix(dense.astype(np.float32))
    return X, Y


def _model() -> tuple[om.omikuji.Model, sp.csr_matrix]:
    X, Y = _data()
    model = om.train_omikuji(X, Y, cluster_k=2, max_depth=2, n_threads=1)
    return model, X


def test_c_call_equals_the_library_predict() -> None:
    model, X = _model()
    Xq = X[:40].tolil()
    Xq[5, :] = 0  # an empty row: no prediction
    Xq = Xq.tocsr()
    Xq.eliminate_zeros()
    for beam, k in ((10, 5), (3, 8)):
        ours = om.predict_omikuji(model, Xq, k, beam_size=beam)
        theirs = []
        for i in range(Xq.shape[0]):
            a, b = Xq.indptr[i], Xq.indptr[i + 1]
            pairs = list(zip(Xq.indices[a:b].tolist(), Xq.data[a:b].tolist(), strict=True))
            theirs.append(model.predict(pairs, beam_size=beam, top_k=k) if pairs else [])
        assert ours == theirs
        filled = np.diff(Xq.indptr) > 0
        assert ours[5] == [] and all(bool(r) == f for r, f in zip(ours, filled, strict=True))


def test_unsorted_rows_and_threads_give_the_same_predictions() -> None:
    model, X = _model()
    serial = om.predict_omikuji(model, X, 6)
    # the same rows with each row's features stored in reverse order
    rev = X.copy()
    for i in range(rev.shape[0]):
        a, b = rev.indptr[i], rev.indptr[i + 1]
        rev.indices[a:b] = rev.indices[a:b][::-1].copy()
        rev.data[a:b] = rev.data[a:b][::-1].copy()
    rev.has_sorted_indices = False
    assert om.predict_omikuji(model, rev, 6) == serial
    with ThreadPoolExecutor(3) as pool:  # rows over 3 threads
        assert om.predict_omikuji(model, X, 6, threads=3, pool=pool) == serial


def test_each_thread_has_its_own_pool() -> None:
    """A model's pool runs every call on its one worker; threads that shared it waited for
    each other. Each thread now passes a pool of its own, kept across calls."""
    seen: dict[str, object] = {}

    def grab(name: str) -> None:
        seen[name] = om._own_pool()
        assert om._own_pool() is seen[name]

    threads = [threading.Thread(target=grab, args=(f"t{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grab("main")
    assert len({id(p) for p in seen.values()}) == 3
