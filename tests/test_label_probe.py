"""The label index's inverted lists scanned a query (issue 66: ``labels_nprobe``): a record's
embedding lies away from the label rows' clusters, so the lists scanned decide how much of
the exact top k the label source finds; the setting reaches a fitted and a loaded index."""

from __future__ import annotations

import numpy as np
import pytest

from tagalign.encode.base import normalise
from tagalign.index import VectorIndex
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.sources.base import FitContext
from tagalign.suggest.sources.labels import LabelRetrieval
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary

pytestmark = pytest.mark.usefixtures("one_faiss_thread")  # tests/conftest.py


def rows_and_queries(seed: int, n: int = 4000, d: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Label-like rows around topical centres, and queries between the centres (a record
    mixes topics), not on any one."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(60, d))
    rows = normalise(centres[rng.integers(0, 60, n)] + 0.5 * rng.normal(size=(n, d)))
    pairs = rng.integers(0, 60, (50, 2))
    mixed = centres[pairs[:, 0]] + centres[pairs[:, 1]]
    queries = normalise(mixed + 0.5 * rng.normal(size=(50, d)))
    return rows, queries


def recall(index: VectorIndex, rows: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    truth = np.argsort(-(queries @ rows.T), axis=1)[:, :k]
    found = index.search(queries, k)[1]
    return float(np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth, strict=True)]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_more_lists_scanned_find_more_of_the_exact_top_k(seed):
    rows, queries = rows_and_queries(seed)
    index = VectorIndex("ivf", nlist=64, nprobe=1, min_ivf=0).build(rows)
    narrow = recall(index, rows, queries)
    wider = recall(index.probe(16), rows, queries)
    assert index.nprobe == 16 and index.index_.nprobe == 16
    assert narrow < 0.9 and wider > narrow + 0.1  # narrow 0.68–0.83 over seeds 0–7
    assert recall(index.probe(64), rows, queries) == 1.0  # every list: the exact search


def test_the_label_source_searches_as_wide_as_its_config_says(tmp_path):
    rows, queries = rows_and_queries(3, n=2000)
    vocab = Vocabulary([Subject(f"s{i}", {"de": f"Label {i}"}) for i in range(len(rows))])
    ctx = FitContext(vocab, Analyzer(), None)
    src = LabelRetrieval(top_k=10, nprobe=2)
    src.n_subjects_ = len(rows)
    src.index_ = VectorIndex("ivf", nlist=32, nprobe=src.config.nprobe, min_ivf=0).build(rows)
    src.save(tmp_path)
    saved = LabelRetrieval(top_k=10, nprobe=2)
    saved.load_state(tmp_path, ctx)
    assert saved.index_.index_.nprobe == 2
    # a model saved with fewer lists (as before the setting) searches as its config says
    wide = LabelRetrieval(top_k=10, nprobe=32)
    wide.load_state(tmp_path, ctx)
    assert wide.index_.index_.nprobe == 32
    narrow_found, wide_found = saved._search(queries)[1], wide._search(queries)[1]
    exact = np.argsort(-(queries @ rows.T), axis=1)[:, :10]
    assert (np.sort(wide_found, axis=1) == np.sort(exact, axis=1)).all()
    assert (np.sort(narrow_found, axis=1) != np.sort(exact, axis=1)).any()


def test_labels_nprobe_is_the_label_sources_setting():
    assert HybridConfig().labels.nprobe == 48
    assert HybridConfig.from_params({"labels_nprobe": 8}).labels.nprobe == 8
    assert HybridConfig.from_params({"labels_nprobe": 8}).to_params()["labels_nprobe"] == 8


def test_one_search_may_scan_other_lists_than_the_index_does():
    """The title query's own lists (``labels_title_nprobe``): per call, the index's own
    setting untouched (concurrent requests share the index)."""
    rows, queries = rows_and_queries(4)
    index = VectorIndex("ivf", nlist=64, nprobe=1, min_ivf=0).build(rows)
    truth = np.argsort(-(queries @ rows.T), axis=1)[:, :10]

    def found(nprobe):
        got = index.search(queries, 10, nprobe)[1]
        return np.mean([len(set(g) & set(t)) / 10 for g, t in zip(got, truth, strict=True)])

    assert found(64) == 1.0 and found(None) == found(1) < 0.9
    assert index.nprobe == 1 and index.index_.nprobe == 1
    src = LabelRetrieval(top_k=10, nprobe=1, title_top_k=10, title_nprobe=64)
    src.n_subjects_ = len(rows)
    src.index_ = index
    title = src._search(queries, 10, src.config.title_nprobe)[1]
    assert np.array_equal(np.sort(title, axis=1), np.sort(truth, axis=1))
    assert HybridConfig.from_params({"labels_title_nprobe": 16}).labels.title_nprobe == 16
