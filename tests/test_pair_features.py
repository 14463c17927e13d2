"""Features every candidate gets whichever source proposed it (issue 66): the index's rows
read back, the label source's ``label_cos`` of any pair (new and relabelled headings too),
the embedding neighbours' evidence of a subject few memory records carry."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from suggesting import suggestions
from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.index import VectorIndex
from tagalign.project import Project
from tagalign.records import Record
from tagalign.suggest.sources.base import Batch, FitContext, NewHeadings
from tagalign.suggest.sources.labels import LabelRetrieval
from tagalign.suggest.sources.memory import RecordMemory, label_matrix
from tagalign.suggest.sources.neighbours import EmbeddingNeighbours, TfidfNeighbours
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary
from tiny_models import KNN_LEXICAL_HYBRID, TOPICS, static_model, tiny_records, tiny_vocab


def unit(rng, n, d=16):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("kind,tol", [("flat", 0), ("hnsw", 0), ("ivf", 0), ("ivfsq8", 0.01)])
def test_index_rows_are_the_vectors_added(kind, tol, tmp_path):
    x = unit(np.random.default_rng(0), 12_000)
    index = VectorIndex(kind).build(x[:11_000])
    ids = np.array([0, 7, 10_999])
    assert np.abs(index.rows(ids) - x[ids]).max() <= tol
    index.add(x[11_000:])  # rows added after the map was made join it
    assert np.abs(index.rows(np.array([11_500])) - x[11_500]).max() <= tol
    index.save(tmp_path / "ix")
    mapped = VectorIndex.load(tmp_path / "ix", mmap=True)
    assert np.abs(mapped.rows(ids) - x[ids]).max() <= tol


def test_label_cos_is_the_records_similarity_to_each_subjects_own_row(tmp_path):
    encoder = StaticEmbeddingEncoder.load(static_model(tmp_path / "s", dim=32))
    vocab = Vocabulary(Subject(sid, {"de": label}) for sid, (label, _) in TOPICS.items())
    src = LabelRetrieval(top_k=3, index="flat", title_top_k=0, anchors=0)
    src.fit(FitContext(vocab, Analyzer(), encoder=encoder))
    texts = [TOPICS[sid][1] for sid in list(TOPICS)[:3]]
    batch = Batch([Record(id=str(i), title=t) for i, t in enumerate(texts)], ["de"] * 3,
                  embeddings=encoder.encode(texts))
    c = src.candidates(batch)
    rows = np.repeat(np.arange(3), len(vocab))
    cols = np.tile(np.arange(len(vocab)), 3)
    got = src.score_pairs(batch, rows, cols)
    assert got.shape == (len(rows), 1) and src.pair_features == ["label_cos"]
    labels = encoder.encode([s.label("de") for s in vocab.subjects])
    want = np.einsum("ij,ij->i", batch.embeddings[rows], labels[cols])
    assert np.allclose(got[:, 0], want, atol=1e-5)
    # its own candidates: the similarity it proposed them by (no alternative labels here)
    own = src.score_pairs(batch, c.rows, c.cols)[:, 0]
    assert np.allclose(own, c.feats[:, 0], atol=1e-5)
    # a position the index has no row for (a vocabulary grown elsewhere): no evidence
    assert np.isnan(src.score_pairs(batch, np.array([0]), np.array([len(vocab) + 5]))).all()
    # an update: a new heading and a relabelled one are scored by their new rows
    moved = vocab.subjects[0].id
    new = Vocabulary([*(Subject(s.id, {"de": "airship hangar"}) if s.id == moved else s
                        for s in vocab), Subject("Z-1", {"de": "timber mould"})])
    src.take_headings(NewHeadings(added=[len(vocab)], relabelled=[0]),
                      FitContext(new, Analyzer(), encoder=encoder))
    after = src.score_pairs(batch, np.array([1, 1, 2]), np.array([0, len(vocab), 2]))[:, 0]
    fresh = encoder.encode(["airship hangar", "timber mould"])
    assert after[:2] == pytest.approx(batch.embeddings[1] @ fresh.T, abs=1e-5)
    assert after[2] == pytest.approx(got[2 * len(vocab) + 2, 0], abs=1e-6)  # unchanged


def _memory(labels: list[list[int]], vocab: Vocabulary, languages: list[str] | None = None
            ) -> RecordMemory:
    """A memory of records carrying the subjects at ``labels``' positions (German unless
    ``languages`` says)."""
    records = [Record(id=f"m{i}", title="", subjects=[vocab.subjects[j].id for j in ls])
               for i, ls in enumerate(labels)]
    return RecordMemory.from_records(records, vocab, languages or ["de"] * len(records))


def test_subject_evidence_is_the_records_similarity_to_the_few_records_of_each_subject():
    rng = np.random.default_rng(3)
    # subject 0: records 0-2; subject 1: record 3; subject 2: records 0-5 (above the cap
    # of 4); subject 3: no record
    labels = [[0, 2], [0, 2], [0, 2], [1, 2], [2], [2]]
    vocab = Vocabulary(Subject(f"S-{i}", {"de": f"s{i}"}) for i in range(4))
    memory, vectors = _memory(labels, vocab), unit(rng, 6)
    src = EmbeddingNeighbours(k=3, index="flat", subject_records=4)
    assert src.pair_features == ["eknn_subject_max", "eknn_subject_mean"]
    src.fit(FitContext(vocab, Analyzer(), memory, Y=memory.Y, embeddings=vectors))
    queries = unit(rng, 2)
    batch = Batch([Record(id=f"q{i}", title="x") for i in range(2)], ["de"] * 2,
                  embeddings=queries)
    rows, cols = np.repeat(np.arange(2), 4), np.tile(np.arange(4), 2)
    got = src.score_pairs(batch, rows, cols)
    sims = queries @ vectors.T
    for r in range(2):
        assert got[4 * r, 0] == pytest.approx(sims[r, :3].max(), abs=1e-5)
        assert got[4 * r, 1] == pytest.approx(sims[r, :3].mean(), abs=1e-5)
        assert got[4 * r + 1] == pytest.approx([sims[r, 3]] * 2, abs=1e-5)
        assert np.isnan(got[4 * r + 2]).all() and np.isnan(got[4 * r + 3]).all()
    # a learned record carrying subject 3: its evidence at once
    extra, learned = unit(rng, 1), [Record(id="m6", title="", subjects=["S-3"])]
    new_rows = memory.append(learned, ["de"], label_matrix(learned, vocab))
    src.learn(Batch(learned, ["de"], embeddings=extra), new_rows)
    after = src.score_pairs(batch, np.array([0, 1]), np.array([3, 3]))
    assert after[:, 0] == pytest.approx((queries @ extra.T)[:, 0], abs=1e-5)
    # blinded (the simulated tail): a withheld subject has no evidence, the others theirs
    blind = src.blind(np.array([True, False, False, False]))
    hidden = blind.score_pairs(batch, np.array([0, 0]), np.array([0, 1]))
    assert np.isnan(hidden[0]).all() and hidden[1] == pytest.approx(got[1], abs=1e-6)
    # off: no pair features at all
    assert EmbeddingNeighbours(subject_records=0).pair_features == []


def test_tfidf_subject_evidence_compares_a_record_with_those_of_its_language_only():
    rng = np.random.default_rng(5)

    def rows_of(n):
        X = sp.random(n, 40, density=0.3, random_state=rng, format="csr", dtype=np.float32)
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
        return sp.diags(1 / np.maximum(norms, 1e-9)) @ X

    # subject 0: a German record (1) and an English one (4); subject 1: English record 5
    vocab = Vocabulary(Subject(f"S-{i}", {"de": f"s{i}"}) for i in range(3))
    memory = _memory([[2], [0], [2], [2], [0], [1]], vocab, ["de"] * 4 + ["en"] * 2)
    X_de, X_en = rows_of(4), rows_of(2)
    src = TfidfNeighbours(k=3, subject_records=4, search="product")  # off by default
    src.fit(FitContext(vocab, Analyzer(), memory, {"de": (np.arange(4), X_de),
                                                    "en": (np.arange(4, 6), X_en)},
                       Y=memory.Y))
    assert src.pair_features == ["tknn_subject_max", "tknn_subject_mean"]
    Q_de, Q_en = rows_of(1), rows_of(1)
    batch = Batch([Record(id="q0", title="x"), Record(id="q1", title="y")], ["de", "en"])
    batch.tfidf = {"de": (np.array([0]), Q_de), "en": (np.array([1]), Q_en)}
    got = src.score_pairs(batch, np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]))
    de_sim = float((Q_de @ X_de[1].T).toarray()[0, 0])
    en_sim = float((Q_en @ X_en[0].T).toarray()[0, 0])
    assert de_sim > 0 and en_sim > 0 and de_sim != pytest.approx(en_sim)
    assert got[0] == pytest.approx([de_sim, de_sim], abs=1e-5)  # the German record only
    assert got[1] == pytest.approx([en_sim, en_sim], abs=1e-5)  # the English one only
    assert np.isnan(got[2]).all()  # subject 1: no German record to compare with
    want = float((Q_en @ X_en[1].T).toarray()[0, 0])
    assert got[3] == pytest.approx([want, want], abs=1e-5)


def test_label_anchor_agreement_compares_each_candidate_with_its_records_strongest_others(
        tmp_path):
    encoder = StaticEmbeddingEncoder.load(static_model(tmp_path / "s", dim=32))
    vocab = Vocabulary(Subject(sid, {"de": label}) for sid, (label, _) in TOPICS.items())
    src = LabelRetrieval(top_k=3, index="flat", title_top_k=0, anchors=2)
    assert src.pair_features == ["label_cos", "label_anchor_max", "label_anchor_mean"]
    src.fit(FitContext(vocab, Analyzer(), encoder=encoder))
    texts = [TOPICS[sid][1] for sid in list(TOPICS)[:2]]
    batch = Batch([Record(id=str(i), title=t) for i, t in enumerate(texts)], ["de"] * 2,
                  embeddings=encoder.encode(texts))
    n = len(vocab)
    # record 0: all subjects, strongest 0 then 1; record 1: subjects 2-4, 4 strongest,
    # then 3, and a position without a label row, strongest of all (no evidence, and not
    # an anchor: the anchors are the strongest with a row)
    rows = np.r_[np.zeros(n, np.int64), [1, 1, 1, 1]]
    cols = np.r_[np.arange(n), [2, 3, 4, n + 5]]
    proxy = np.r_[np.linspace(1, 0, n), [0.1, 0.5, 0.9, 5.0]]
    got = src.score_pairs(batch, rows, cols, proxy)
    labels = encoder.encode([s.label("de") for s in vocab.subjects])
    cos = labels @ labels.T
    # an anchor against the other anchor only
    assert got[0, 1:] == pytest.approx([cos[0, 1]] * 2, abs=1e-5)
    assert got[1, 1:] == pytest.approx([cos[1, 0]] * 2, abs=1e-5)
    # any other candidate against both anchors
    for c in range(2, n):
        assert got[c, 1:] == pytest.approx([max(cos[c, 0], cos[c, 1]),
                                            (cos[c, 0] + cos[c, 1]) / 2], abs=1e-5)
    assert got[n, 1:] == pytest.approx([max(cos[2, 4], cos[2, 3]),
                                        (cos[2, 4] + cos[2, 3]) / 2], abs=1e-5)
    assert got[n + 2, 1:] == pytest.approx([cos[4, 3]] * 2, abs=1e-5)
    assert np.isnan(got[n + 3]).all()  # no label row: neither similarity
    # a few pairs at a time (a record's pairs never split): the same figures
    for chunk in (1, 3, 7):
        assert np.allclose(src.score_pairs(batch, rows, cols, proxy, chunk=chunk), got,
                           atol=1e-6, equal_nan=True)
    # the label_cos column is as before; without a proxy, no anchors to compare with
    assert got[:n, 0] == pytest.approx(batch.embeddings[0] @ labels.T, abs=1e-5)
    assert np.isnan(src.score_pairs(batch, rows, cols)[:, 1:]).all()
    assert LabelRetrieval(anchors=0).pair_features == ["label_cos"]


def test_the_hybrid_ranks_with_the_tail_evidence_and_a_model_saved_before_it_without(
        tmp_path):
    """A hybrid's ranker learns the neighbours' per-subject evidence; a model saved before
    it (its manifest without ``knn_subject_records`` and ``labels_anchors``) loads with
    none, as its ranker learned, and ranks as it did."""
    records = tiny_records(120, seed=3)
    tiny = {**KNN_LEXICAL_HYBRID, "sources": ["tfidf_knn", "emb_knn", "lexical"],
            "embed_dim": 16, "embed_vocab_size": 500, "embed_epochs": 1}
    new = Project.create(tmp_path / "new", tiny_vocab(), "hybrid",
                         {**tiny, "tfidf_subject_records": 8})
    new.train(records)
    assert {"tknn_subject_max", "eknn_subject_max", "eknn_subject_mean"} <= set(
        new.recipe.pipeline.ranker.feature_names_)
    folder = tmp_path / "old"
    old = Project.create(folder, tiny_vocab(), "hybrid", {**tiny, "knn_subject_records": 0})
    old.train(records)
    before = [[s.id for s in row] for row in suggestions(old, tiny_records(10, seed=4),
                                                         limit=5)]
    manifest = folder / "model" / "recipe.json"
    meta = json.loads(manifest.read_text())
    del meta["params"]["knn_subject_records"], meta["params"]["labels_anchors"]
    manifest.write_text(json.dumps(meta))
    loaded = Project.load(folder)
    assert loaded.recipe.params["knn_subject_records"] == 0
    assert [s.pair_features for s in loaded.recipe.pipeline.sources] == [[], [], []]
    assert [[s.id for s in row] for row in suggestions(loaded, tiny_records(10, seed=4),
                                                       limit=5)] == before
