"""Compressed neighbour indexes (issue 11): IVF-SQ8 and IVF-PQ keep most true neighbours in
a fraction of the bytes, save and load without pickle to the same neighbours, and refuse a
file that does not match its config, the encoder or the neighbour memory."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from tagalign.index import LazyRows, VectorIndex
from tagalign.suggest.sources.base import FitContext
from tagalign.suggest.sources.memory import RecordMemory
from tagalign.suggest.sources.neighbours import EmbeddingNeighbours
from tagalign.text import Analyzer
from tagalign.vocab import Vocabulary

pytestmark = pytest.mark.usefixtures("one_faiss_thread")  # tests/conftest.py


def clustered(seed: int, n: int, d: int = 32, centres: int = 40) -> np.ndarray:
    """Unit vectors around a few centres (like record embeddings: topical clusters)."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centres, d))
    x = c[rng.integers(0, centres, n)] + 0.6 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth,
                                                                         strict=True)]))


@pytest.mark.parametrize(("kind", "floor", "max_bytes_share"),
                         [("ivfsq8", 0.9, 0.35), ("ivfpq", 0.6, 0.2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compressed_kinds_keep_neighbours_in_fewer_bytes(tmp_path, kind, floor,
                                                         max_bytes_share, seed):
    base, q = clustered(seed, 3000), clustered(seed + 100, 40)
    truth = np.argsort(-(q @ base.T), axis=1)[:, :10]
    index = VectorIndex(kind, nlist=16, nprobe=8, pq_m=16, pq_bits=6, min_ivf=0).build(base)
    scores, found = index.search(q, 10)
    assert recall_at(found, truth) >= floor
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    index.save(tmp_path / kind)
    VectorIndex("flat").build(base).save(tmp_path / "flat")
    size = (tmp_path / kind / "index.faiss").stat().st_size
    assert size <= max_bytes_share * (tmp_path / "flat" / "index.faiss").stat().st_size
    again = VectorIndex.load(tmp_path / kind)
    assert again.kind == kind and len(again) == 3000 and again.nprobe == 8
    s2, f2 = again.search(q, 10)
    assert (f2 == found).all() and np.allclose(s2, scores)


def test_small_sets_stay_exact_and_bad_pq_m_is_named():
    base, q = clustered(0, 500), clustered(1, 5)
    truth = np.argsort(-(q @ base.T), axis=1)[:, :5]
    assert (VectorIndex("ivfpq").build(base).search(q, 5)[1] == truth).all()  # < min_ivf
    with pytest.raises(ValueError, match="pq_m=5 must divide the vector dimension 32"):
        VectorIndex("ivfpq", pq_m=5, min_ivf=0, nlist=4).build(base)


def test_load_refuses_a_mismatched_index(tmp_path):
    base = clustered(0, 2000)
    VectorIndex("ivfpq", nlist=8, pq_m=8, pq_bits=6, min_ivf=0).build(base).save(tmp_path / "ix")
    with pytest.raises(ValueError, match="dimension 32, the encoder gives 64"):
        VectorIndex.load(tmp_path / "ix", dim=64)
    meta_path = tmp_path / "ix" / "index.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "kind": "hnsw"}))
    with pytest.raises(ValueError, match="holds a faiss IndexIVFPQ, but .* says kind 'hnsw'"):
        VectorIndex.load(tmp_path / "ix")
    meta_path.write_text(json.dumps({**meta, "ntotal": 1999}))
    with pytest.raises(ValueError, match="ntotal 2000 does not match 1999"):
        VectorIndex.load(tmp_path / "ix")


def memory(n: int) -> RecordMemory:
    Y = sp.csr_matrix(np.eye(n, 4, dtype=np.float32))
    return RecordMemory([f"r{i}" for i in range(n)], [f"t{i}" for i in range(n)], ["de"] * n, Y)


def test_emb_knn_saves_the_compressed_index_and_refuses_another_memory(tmp_path):
    vecs = clustered(3, 1200)
    src = EmbeddingNeighbours(k=5, index="ivfsq8")
    ctx = FitContext(Vocabulary([]), Analyzer(), memory(1200), embeddings=vecs)
    src.index_ = VectorIndex("ivfsq8", nlist=8, min_ivf=0).build(vecs)
    src.memory = ctx.memory
    src.save(tmp_path)
    again = EmbeddingNeighbours(k=5, index="ivfsq8")
    again.load_state(tmp_path, ctx)
    assert again.index_.kind == "ivfsq8"
    assert (again.index_.search(vecs[:20], 5)[1] == src.index_.search(vecs[:20], 5)[1]).all()
    with pytest.raises(ValueError, match="1200 record vectors, but the neighbour memory "
                                         "holds 1000 records"):
        EmbeddingNeighbours(k=5).load_state(tmp_path, FitContext(
            Vocabulary([]), Analyzer(), memory(1000)))


@pytest.mark.parametrize("kind", ["flat", "ivfsq8", "ivfpq"])
def test_memory_mapped_load_finds_the_same_neighbours_and_is_read_only(tmp_path, kind):
    base, q = clustered(4, 3000), clustered(5, 30)
    index = VectorIndex(kind, nlist=16, pq_m=16, pq_bits=6, min_ivf=0).build(base)
    index.save(tmp_path / kind)
    mapped = VectorIndex.load(tmp_path / kind, mmap=True)
    assert mapped.mmap and len(mapped) == 3000
    s1, f1 = index.search(q, 10)
    s2, f2 = mapped.search(q, 10)
    assert (f1 == f2).all() and np.allclose(s1, s2)
    with pytest.raises(ValueError, match="memory-mapped"):
        mapped.add(base[:2])


@pytest.mark.parametrize("kind", ["flat", "ivf", "ivfsq8", "ivfpq", "hnsw"])
def test_an_index_of_parts_is_the_index_of_their_concatenation(kind):
    """Issue 48: `build` of a list of arrays (the label index's preferred-label and
    alternative-label rows) trains on the same sample rows and holds the same rows in the
    same order as `build` of their concatenation, without making it: the same answers."""
    x = clustered(3, 3000)
    q = clustered(4, 40)
    settings = {"min_ivf": 500, "nlist": 16, "pq_m": 8}
    whole = VectorIndex(kind, **settings).build(x)
    parts = VectorIndex(kind, **settings).build([x[:1234], x[1234:2990], x[2990:]])
    asked: list[int] = []

    def made(offset: int):
        return lambda pos: (asked.append(len(pos)), x[offset + pos])[1]

    # rows made as the build asks for them (`LazyRows`: the label index's encoded labels)
    lazy = VectorIndex(kind, **settings).build([LazyRows(1234, made(0), chunk=100),
                                                x[1234:2990], LazyRows(10, made(2990))])
    assert len(parts) == len(whole) == len(lazy) == 3000
    for a, b, c in zip(whole.search(q, 10), parts.search(q, 10), lazy.search(q, 10),
                       strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    # never all 1,234 rows at once: chunks of 100 and (IVF kinds) the clustering's sample
    # of 40 rows a cluster (product quantisation's codebooks want all 3,000 here)
    if kind != "ivfpq":
        assert max(asked) <= (100 if kind in ("flat", "hnsw") else 16 * 40)
