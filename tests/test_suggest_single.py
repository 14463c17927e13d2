"""Single-record suggest (issue 23): the fast paths give the same subjects and scores as the
general ones they bypass.

The fast paths: the static encoder's own forward pass for one batch (instead of
`SentenceTransformer.encode`), LightGBM on one thread for a few hundred candidate rows, and
Omikuji's label trees on a one-thread pool. The reference is the code before them: the
sentence-transformers call, LightGBM's default threads, Omikuji's default pool.

Model: the default hybrid (all five sources) trained on a seeded sample of 600 training
records, with a vocabulary cut to their subjects (so the label index is small): the
session's ``sample_hybrid`` (tests/conftest.py), trained once for tests/test_mmap.py too.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from serving import LiveServer
from suggesting import suggestions, tag
from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.encode.transformer import STEncoder
from tagalign.feedback import FeedbackStore
from tagalign.project import Project
from tagalign.runtime import Runtime
from tagalign.serve.app import create_app
from tagalign.suggest.fusion import COMPILED_TOLERANCE, SMALL_PREDICT, FusionRanker
from tiny_models import static_model, tiny_records


def reference_encode(self, texts, *, kind="passage", batch_size=512, show_progress=False):
    """The static encoder before the fast path: every call through sentence-transformers."""
    return STEncoder.encode(self, texts, kind=kind, batch_size=batch_size,
                            show_progress=show_progress)


def reference_predict(self, X, names=None, threads=1):
    """The ranker before the fast path: LightGBM's default thread count for every batch."""
    if len(X) == 0:
        return np.zeros(0, np.float32)
    if names is not None and (cols := self.columns(names)) is not None:
        X = X[:, cols]
    return self.booster_.predict(X, num_iteration=self.booster_.best_iteration or None)


def test_static_encoder_one_batch_equals_sentence_transformers(tmp_path):
    enc = StaticEmbeddingEncoder.load(static_model(tmp_path / "m", dim=64))
    texts = [r.text for r in tiny_records(40)] + ["", "zzz qqq", "Künstliche Intelligenz"]
    ref = reference_encode(enc, texts)
    assert np.abs(ref).sum() > 10  # real vectors, not zeros
    one = np.vstack([enc.encode([t]) for t in texts])
    assert np.array_equal(one, ref)
    assert np.array_equal(enc.encode(texts), ref)


def test_ranker_scores_small_batches_as_the_threaded_path():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.3] = np.nan  # sources that missed a candidate
    y = (np.nan_to_num(X[:, 0]) + rng.normal(size=3000) > 0).astype(np.float32)
    ranker = FusionRanker(num_rounds=40, num_threads=2).fit(
        X, y, np.arange(3000) // 30, [f"f{i}" for i in range(6)])
    for n in (1, 37, SMALL_PREDICT - 1, SMALL_PREDICT):
        got = ranker.predict(X[:n])
        assert np.array_equal(got, reference_predict(ranker, X[:n]))
    assert len(np.unique(ranker.predict(X[:100]).round(4))) > 20


@pytest.fixture(scope="module")
def data(sample_case):
    """The session's sample (tests/conftest.py), 40 of its dev records."""
    vocab, train, dev = sample_case
    return vocab, train, dev[:40]


@pytest.fixture(scope="module")
def trained(sample_hybrid) -> Path:
    """The session's `SAMPLE_HYBRID` on the sample (read-only)."""
    return sample_hybrid


def reference_project(path: Path, monkeypatch) -> Project:
    """The project as served before the fast paths."""
    proj = Project.load(path)
    pipe = proj.recipe.pipeline
    monkeypatch.setattr(pipe.encoder, "encode", reference_encode.__get__(pipe.encoder))
    monkeypatch.setattr(pipe.ranker, "predict", reference_predict.__get__(pipe.ranker))
    omikuji = next(s for s in pipe.sources if s.name == "omikuji")
    for model in omikuji.models_.values():
        model.init_prediction_thread_pool(0)  # Omikuji's default: threads chosen by rayon
    return proj


def as_tuples(rows):
    return [[(s.id, s.score, s.reasons) for s in row] for row in rows]


def test_single_record_suggestions_equal_the_reference_path(trained, data, monkeypatch):
    dev = data[2]
    fast = Project.load(trained)
    ref = reference_project(trained, monkeypatch)
    got = [suggestions(fast, [r], limit=10)[0] for r in dev]
    want = [suggestions(ref, [r], limit=10)[0] for r in dev]
    assert sum(len(row) for row in got) == 10 * len(dev)  # real suggestions
    assert as_tuples(got) == as_tuples(want)
    # the batch path of the fast project ranks the same subjects
    batch = suggestions(fast, dev, limit=10)
    assert [[s.id for s in row] for row in batch] == [[s.id for s in row] for row in got]
    assert np.allclose([s.score for row in batch for s in row],
                       [s.score for row in got for s in row], atol=1e-6)


def test_served_single_records_carry_the_reference_scores(trained, data, monkeypatch):
    dev = data[2][:10]
    ref = reference_project(trained, monkeypatch)
    want = [suggestions(ref, [r], limit=10)[0] for r in dev]
    db = Path(tempfile.mkdtemp()) / "feedback.sqlite"
    app = create_app({"proj": Project.load(trained)}, FeedbackStore(f"sqlite:///{db}"))
    with LiveServer(app) as server, httpx.Client(timeout=30) as client:
        for r, row in zip(dev, want, strict=True):
            res = client.post(f"{server.url}/tagalign/v1/projects/proj/suggest",
                              json={"title": r.title, "abstract": r.abstract,
                                    "language": r.language, "limit": 10})
            assert res.status_code == 200
            assert [(x["id"], x["score"]) for x in res.json()["results"]] == \
                [(s.id, round(s.score, 6)) for s in row]


def test_small_batches_on_threads_equal_the_serial_path(trained, data):
    dev = data[2]
    # 2 threads, so the threaded path is the one tested; the serial path: one thread
    proj = Project.load(trained, runtime=Runtime(threads=2))
    pool = proj.runtime.pool()
    assert pool is not None
    submitted = []
    real_submit = pool.submit
    pool.submit = lambda fn, *a: submitted.append(fn) or real_submit(fn, *a)
    try:
        got = [suggestions(proj, [r], limit=10)[0] for r in dev] \
            + suggestions(proj, dev[:5], limit=10)
    finally:
        del pool.submit
    # per small batch: the encoder and all but the first of the five sources went to threads
    assert len(submitted) == (len(dev) + 1) * 5
    serial = Project.load(trained, runtime=Runtime(threads=1))
    assert serial.runtime.pool() is None
    want = [suggestions(serial, [r], limit=10)[0] for r in dev] \
        + suggestions(serial, dev[:5], limit=10)
    assert sum(len(row) for row in got) == 10 * (len(dev) + 5)
    assert as_tuples(got) == as_tuples(want)


def test_large_batches_in_parts_equal_the_serial_path(trained, data, monkeypatch):
    """Issue 18: a batch split into parts on threads, each calling its libraries with one
    thread, returns what one serial pass returns (suggestions, reasons, quality)."""
    import tagalign.suggest.pipeline as pipeline_module

    dev = data[2]
    monkeypatch.setattr(pipeline_module, "MIN_PART", 8)
    proj = Project.load(trained, runtime=Runtime(threads=2))
    pool = proj.runtime.parts_pool()
    parts = []
    real_submit = pool.submit
    pool.submit = lambda fn, recs, *a: parts.append(len(recs)) or real_submit(fn, recs, *a)
    try:
        got = suggestions(proj, dev, limit=10)
        got_q = tag(proj, dev, limit=10, threshold=0.1)
    finally:
        del pool.submit
    assert parts == [20, 20, 20, 20]  # each call split once into two parts
    serial = Project.load(trained, runtime=Runtime(threads=1))
    want = suggestions(serial, dev, limit=10)
    want_q = tag(serial, dev, limit=10, threshold=0.1)
    assert sum(len(row) for row in got) == 10 * len(dev)
    assert as_tuples(got) == as_tuples(want)
    assert [(as_tuples([t.suggestions]), t.quality) for t in got_q] == \
        [(as_tuples([t.suggestions]), t.quality) for t in want_q]
    assert any(t.quality is not None for t in got_q)


def test_compiled_ranker_is_decided_at_load_and_scores_within_its_tolerance(trained, data,
                                                                             tmp_path):
    """Issue 29: the compiled trees score every batch of a project loaded with
    ``compile_ranker``, whatever ran before, within `COMPILED_TOLERANCE` of LightGBM."""
    dev = data[2]
    plain = Project.load(trained)
    compiled = Project.load(trained, runtime=Runtime(compile_ranker=True, cache_dir=tmp_path))
    assert plain.recipe.pipeline.ranker.compiled_ is None
    assert compiled.recipe.pipeline.ranker.compiled_ is not None
    assert len(list(tmp_path.glob("ranker-*.so"))) == 1
    for records in ([dev[0]], dev):  # one record (a few rows) and a batch
        want = suggestions(plain, records, limit=10)
        got = suggestions(compiled, records, limit=10)
        assert [[s.id for s in row] for row in got] == [[s.id for s in row] for row in want]
        assert np.allclose([s.score for row in got for s in row],
                           [s.score for row in want for s in row], rtol=0,
                           atol=COMPILED_TOLERANCE)
