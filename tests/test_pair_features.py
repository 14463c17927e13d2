"""Features every candidate gets whichever source proposed it (issue 66): the index's rows
read back, the label source's ``label_cos`` of any pair (new and relabelled headings too)."""

from __future__ import annotations

import numpy as np
import pytest

from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.index import VectorIndex
from tagalign.records import Record
from tagalign.suggest.sources.base import Batch, FitContext, NewHeadings
from tagalign.suggest.sources.labels import LabelRetrieval
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary
from tiny_models import TOPICS, static_model


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
    src = LabelRetrieval(top_k=3, index="flat", title_top_k=0)
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
