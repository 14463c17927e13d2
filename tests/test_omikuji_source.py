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



def _fitted_rows(monkeypatch, X: sp.csr_matrix, Y: sp.csr_matrix, **config: object
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What an `OmikujiSource` fitted on two 'languages' of the rows hands Omikuji's
    trainer per language (its features and labels, dense). Omikuji's own training is not
    deterministic (its clustering), so the rows are compared, not the trees."""
    from tagalign.suggest.sources.base import FitContext

    got = {}

    def trainer(Xl, Yl, **kw):
        got[len(got)] = (Xl.toarray(), Yl.toarray())
        return "trees"

    monkeypatch.setattr(om, "train_omikuji", trainer)
    half = X.shape[0] // 2
    parts = {"de": np.arange(half), "en": np.arange(half, X.shape[0])}
    src = om.OmikujiSource(cluster_k=2, max_depth=2, **config)
    src.fit(FitContext(None, None, tfidf={k: (i, X[i]) for k, i in parts.items()}, Y=Y,
                       threads=1))
    assert src.models_ == dict.fromkeys(parts, "trees")
    return {k: got[n] for n, k in enumerate(parts)}


def test_record_cap_trains_on_its_seeded_sample_only(monkeypatch) -> None:
    """``max_records`` (the hybrid's ``omikuji_max_records``): a capped source trains its
    trees on its seeded sample of labelled rows only, each language's rows in their order;
    a cap at the labelled count changes nothing."""
    X, Y = _data(3)
    has = np.diff(Y.indptr) > 0
    labelled = int(has.sum())
    assert 150 < labelled < 240  # some rows have no label: the cap counts labelled ones
    full = _fitted_rows(monkeypatch, X, Y)
    same = _fitted_rows(monkeypatch, X, Y, max_records=labelled)
    for k in full:
        assert all(np.array_equal(a, b) for a, b in zip(full[k], same[k], strict=True))

    src = om.OmikujiSource(max_records=120, seed=5)
    keep = src.sample(Y)
    assert len(keep) == 120 and np.all(np.diff(keep) > 0) and np.all(has[keep])
    assert np.array_equal(keep, om.OmikujiSource(max_records=120, seed=5).sample(Y))
    assert not np.array_equal(keep, om.OmikujiSource(max_records=120, seed=6).sample(Y))
    capped = _fitted_rows(monkeypatch, X, Y, max_records=120, seed=5)
    half = X.shape[0] // 2
    for k, rows in (("de", keep[keep < half]), ("en", keep[keep >= half])):
        assert np.array_equal(capped[k][0], X[rows].toarray())
        assert np.array_equal(capped[k][1], Y[rows].toarray())
    assert sum(len(v[0]) for v in capped.values()) == 120


def test_the_hybrid_caps_omikuji_at_100000_records_by_default() -> None:
    """``omikuji_max_records`` is read into the source's config (split A's trees and the
    final ones); 100,000 by default: a 90k training is unchanged."""
    import pytest

    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import HybridConfig

    assert HybridConfig.from_params(HybridRecipe.defaults).omikuji.max_records == 100_000
    assert om.OmikujiConfig().max_records == 100_000  # the source's own default: the same
    given = {**HybridRecipe.defaults, "omikuji_max_records": 250, "seed": 4}
    config = HybridConfig.from_params(given).omikuji
    assert (config.max_records, config.seed) == (250, 4)
    assert HybridConfig.from_params({**given, "omikuji_max_records": None}
                                    ).omikuji.max_records is None
    with pytest.raises(ValueError, match="omikuji_max_records"):
        HybridConfig.from_params({**given, "omikuji_max_records": 0})


def test_n_trees_sets_how_many_trees_each_language_grows(tmp_path) -> None:
    """``n_trees`` (the hybrid's ``omikuji_n_trees``, default 1, the source's own default
    too; Omikuji's is 3) is the number of trees each language's model saves; one tree predicts."""
    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import HybridConfig
    from tagalign.suggest.sources.base import FitContext

    assert HybridConfig.from_params(HybridRecipe.defaults).omikuji.n_trees == 1
    assert om.OmikujiConfig().n_trees == 1
    assert HybridConfig.from_params({**HybridRecipe.defaults, "omikuji_n_trees": 3}
                                    ).omikuji.n_trees == 3
    X, Y = _data(1)
    half = X.shape[0] // 2
    parts = {"de": np.arange(half), "en": np.arange(half, X.shape[0])}
    for n in (1, 3):
        src = om.OmikujiSource(n_trees=n, cluster_k=2, max_depth=2)
        src.fit(FitContext(None, None, tfidf={k: (i, X[i]) for k, i in parts.items()}, Y=Y,
                           threads=1))
        out = tmp_path / str(n)
        out.mkdir()
        src.save(out)
        for lang in parts:
            assert len(list((out / f"omikuji-{lang}").glob("tree*.cbor"))) == n
        preds = om.predict_omikuji(src.models_["de"], X[:5], top_k=3)
        assert all(len(p) == 3 for p in preds)


def test_beam_size_is_the_search_width_the_source_predicts_with() -> None:
    """``beam_size`` (the hybrid's ``omikuji_beam_size``, default 10 as Omikuji's own) is
    what the source's candidates are searched with: a beam of 1 gives the library's beam-1
    lists, which differ from its beam-10 lists on this data."""
    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import HybridConfig
    from tagalign.suggest.sources.base import Batch, FitContext

    assert HybridConfig.from_params(HybridRecipe.defaults).omikuji.beam_size == 10
    X, Y = _data(2)
    idx = np.arange(X.shape[0])
    got = {}
    for beam in (1, 10):
        src = om.OmikujiSource(beam_size=beam, top_k=8, cluster_k=2, max_depth=3)
        src.fit(FitContext(None, None, tfidf={"de": (idx, X)}, Y=Y, threads=1))
        batch = Batch(records=[None] * 20, languages=["de"] * 20,  # type: ignore[list-item]
                      tfidf={"de": (np.arange(20), X[:20])})
        c = src.candidates(batch)
        want = om.predict_omikuji(src.models_["de"], X[:20], top_k=8, beam_size=beam)
        assert c.cols.tolist() == [s for row in want for s, _ in row]
        got[beam] = c.cols.tolist()
    assert got[1] != got[10]


def test_refit_is_skipped_when_split_a_fills_the_cap(tmp_path) -> None:
    """``refit_full="auto"`` (the default): the trees are refit on all records unless
    split A's records already fill ``omikuji_max_records`` (the refit would learn from
    another sample of the same size; issue 48); True and False force it either way."""
    import pytest

    from tagalign.params import ParamError
    from tagalign.project import Project
    from tagalign.train.stacking import in_holdout
    from tiny_models import TINY_HYBRID, tiny_records, tiny_vocab

    records = tiny_records(120, seed=0)
    n_a = sum(not in_holdout(r.id, TINY_HYBRID["holdout_fraction"], 13) for r in records)
    assert 80 < n_a < 110
    for n, (params, refits) in enumerate([({}, True), ({"omikuji_max_records": 50}, False),
                                          ({"omikuji_max_records": n_a}, False),
                                          ({"omikuji_max_records": n_a + 1}, True),
                                          ({"omikuji_max_records": 50, "refit_full": True},
                                           True),
                                          ({"refit_full": False}, False)]):
        folder = tmp_path / f"p{n}"
        Project.create(folder, tiny_vocab(), "hybrid", {**TINY_HYBRID, **params}
                       ).train(records)
        timings = Project.load(folder).recipe.timings_
        assert "source-omikuji" in timings
        assert ("source-omikuji-full" in timings) is refits, params
    with pytest.raises(ParamError, match="refit_full"):
        Project.create(tmp_path / "bad", tiny_vocab(), "hybrid", {"refit_full": "sometimes"})
