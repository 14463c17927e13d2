"""Agreement features (issue 18): co-assignment of a candidate with its record's anchors,
checked against their definition written out pair by pair; and a ranker saved before new
features existed still scores (by name), while one needing a lost feature is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tagalign.suggest.agreement import CoAssignment, rrf
from tagalign.suggest.fusion import COMPILED_TOLERANCE, FusionRanker, host_cpu


def brute(Y: np.ndarray, rows, cols, proxy, top_m):
    count = Y.sum(0)
    C = Y.T @ Y
    out = []
    for r, c in zip(rows, cols, strict=True):
        mine = [i for i in range(len(rows)) if rows[i] == r]
        # anchors: the top_m of the record by proxy, ties by position (lexsort is stable)
        order = sorted(mine, key=lambda i: -proxy[i])[:top_m]
        anchors = [cols[i] for i in order if cols[i] != c]
        cond = [C[a, c] / count[a] if count[a] else 0.0 for a in anchors]
        out.append([sum(cond), sum(1 for a in anchors if C[a, c] > 0), max(cond, default=0.0)])
    return np.array(out, np.float32).reshape(-1, 3)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_agreement_features_match_their_definition(seed, top_m):
    rng = np.random.default_rng(seed)
    n_subj, n_train, n_rows = 8, 30, 3
    Y = (rng.random((n_train, n_subj)) < 0.3).astype(np.float32)
    co = CoAssignment.from_labels(sp.csr_matrix(Y))
    pairs = sorted({(int(r), int(c)) for r, c in zip(rng.integers(0, n_rows, 12),
                                                    rng.integers(0, n_subj, 12), strict=True)})
    pairs = [pairs[i] for i in rng.permutation(len(pairs))]  # records interleaved
    rows = np.array([p[0] for p in pairs])
    cols = np.array([p[1] for p in pairs])
    proxy = rng.permutation(len(rows)).astype(np.float64)  # distinct: no tie questions
    got = co.features(rows, cols, proxy, n_rows, top_m)
    np.testing.assert_allclose(got, brute(Y, rows, cols, proxy, top_m), rtol=1e-5, atol=1e-6)


def test_worked_example_and_rrf():
    # s0 and s1 are assigned together twice, s2 alone once
    Y = sp.csr_matrix(np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1], [1, 0, 0]], np.float32))
    co = CoAssignment.from_labels(Y)
    assert co.cond[0, 1] == pytest.approx(2 / 3) and co.cond[1, 0] == 1.0
    # one record, candidates s0 (anchor), s1, s2; top_m=1 keeps s0 only
    X = np.array([[1.0, np.nan], [np.nan, 2.0], [3.0, np.nan]], np.float32)
    proxy = rrf(X, ["a_rank", "b_rank"])
    assert proxy.tolist() == pytest.approx([1 / 61, 1 / 62, 1 / 63])
    got = co.features(np.zeros(3, np.int64), np.arange(3), proxy, 1, top_m=1)
    assert got.tolist() == [[0, 0, 0], [pytest.approx(2 / 3), 1, pytest.approx(2 / 3)],
                            [0, 0, 0]]


def test_ranker_scores_by_feature_name_and_refuses_a_lost_feature():
    rng = np.random.default_rng(0)
    X = rng.random((400, 2)).astype(np.float32)
    y = (X[:, 0] > 0.5).astype(np.float32)
    rows = np.repeat(np.arange(40), 10)
    ranker = FusionRanker(num_rounds=20, num_threads=1).fit(X, y, rows, ["a", "b"])
    wider = np.column_stack([X[:, 1], rng.random(400), X[:, 0]]).astype(np.float32)
    np.testing.assert_array_equal(ranker.predict(wider, ["b", "new", "a"]), ranker.predict(X))
    with pytest.raises(ValueError, match="retrain"):
        ranker.predict(X[:, :1], ["a"])


def test_compiled_ranker_gives_lightgbm_scores(tmp_path):
    """Issue 18: batches are scored by the trees compiled with lleaves (cached by the
    model's hash); the scores are LightGBM's within `COMPILED_TOLERANCE`, NaNs included."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.3] = np.nan
    y = (np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 1]) + rng.normal(size=3000) > 0)
    ranker = FusionRanker(num_rounds=30, num_threads=1).fit(
        X, y.astype(np.float32), np.arange(3000) // 30, [f"f{i}" for i in range(5)])
    want = ranker.booster_.predict(X, num_iteration=ranker.booster_.best_iteration or None)
    assert ranker.predict(X) is not None and ranker.compiled_ is None  # off unless asked
    assert ranker.compile(tmp_path)
    got = ranker.predict(X)
    assert len(list(tmp_path.glob("ranker-*.so"))) == 1
    np.testing.assert_allclose(got, want, rtol=0, atol=COMPILED_TOLERANCE)
    assert len(np.unique(got.round(3))) > 50
    # a few rows (one record's candidates) are scored by the compiled trees too
    np.testing.assert_allclose(ranker.predict(X[:7]), want[:7], rtol=0, atol=COMPILED_TOLERANCE)
    # a second ranker of the same model loads the cached object instead of compiling
    again = FusionRanker.load(_saved(ranker, tmp_path / "r"))
    assert again.compile(tmp_path)
    np.testing.assert_allclose(again.predict(X), want, rtol=0, atol=COMPILED_TOLERANCE)
    assert len(list(tmp_path.glob("ranker-*.so"))) == 1


def _saved(ranker, path):
    path.mkdir()
    ranker.save(path)
    return path


def test_cached_ranker_object_is_verified_before_it_is_loaded(tmp_path):
    """Issue 30: a shared object in the cache runs when loaded, so it is loaded only when its
    hash and CPU match the record written when it was built here, and only from a folder
    no one else can write; otherwise the trees are compiled again."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(2000, 4)).astype(np.float32)
    y = (X[:, 0] + rng.normal(size=2000) > 0).astype(np.float32)
    ranker = FusionRanker(num_rounds=20, num_threads=1).fit(
        X, y, np.arange(2000) // 20, [f"f{i}" for i in range(4)])
    want = ranker.booster_.predict(X, num_iteration=ranker.booster_.best_iteration or None)
    cache = tmp_path / "cache"
    assert ranker.compile(cache)
    (so,) = cache.glob("ranker-*.so")
    meta = json.loads(so.with_suffix(".json").read_text())
    assert meta["cpu"] == host_cpu() and len(meta["sha256"]) == 64
    # a tampered object (here: garbage; it could be anyone's code) is rebuilt, not loaded
    so.write_bytes(b"\x7fELF not the object that was built here")
    assert ranker.compile(cache)
    np.testing.assert_allclose(ranker.predict(X), want, rtol=0, atol=COMPILED_TOLERANCE)
    assert so.read_bytes()[:4] == b"\x7fELF" and len(so.read_bytes()) > 1000
    # an object built for another CPU is rebuilt
    before = so.stat().st_ino
    so.with_suffix(".json").write_text(json.dumps({**meta, "cpu": "another-cpu:0"}))
    assert ranker.compile(cache)
    assert so.stat().st_ino != before
    # a cache others can write is not used
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert ranker.compile(shared)
    assert not list(shared.glob("ranker-*"))
    np.testing.assert_allclose(ranker.predict(X), want, rtol=0, atol=COMPILED_TOLERANCE)
