"""FAISS inner-product index: exact top-k equals NumPy brute force; approximate kinds."""

from __future__ import annotations

import numpy as np
import pytest

from tagalign.index import VectorIndex


def unit(rng, n, d=24):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_topk_equals_numpy_brute_force(tmp_path):
    rng = np.random.default_rng(0)
    base, q = unit(rng, 500), unit(rng, 7)
    sims = q @ base.T
    brute = np.argsort(-sims, axis=1, kind="stable")[:, :10]
    scores, pos = VectorIndex().build(base).search(q, 10)
    assert scores.shape == pos.shape == (7, 10)
    assert (pos == brute).all()
    assert np.allclose(scores, np.take_along_axis(sims, brute, 1), atol=1e-5)
    index = VectorIndex("flat").build(base)
    index.save(tmp_path / "ix")
    again = VectorIndex.load(tmp_path / "ix")
    assert len(again) == 500 and (again.search(q, 10)[1] == brute).all()
    assert np.allclose(again.vectors(), base)
    few = VectorIndex().build(base[:3]).search(q, 10)
    assert few[1].shape == (7, 3)  # never more columns than vectors


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_kinds_find_most_true_neighbours(tmp_path, kind):
    rng = np.random.default_rng(1)
    base, q = unit(rng, 12_000, 16), unit(rng, 20, 16)
    truth = np.argsort(-(q @ base.T), axis=1)[:, 0]
    index = VectorIndex(kind).build(base)
    assert (index.search(q, 1)[1][:, 0] == truth).mean() >= 0.8
    index.save(tmp_path / kind)
    again = VectorIndex.load(tmp_path / kind)
    assert again.kind == kind
    assert (again.search(q, 5)[1] == index.search(q, 5)[1]).all()


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown index kind"):
        VectorIndex("lsh")
