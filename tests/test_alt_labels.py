"""Alternative labels at work: the lexical and label sources find a subject through one
(and say which), the lexical recipe and the page's subject search over real HTTP too; a
vocabulary without them gives the label source its index and results as before."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import httpx
import numpy as np
import pytest

from marc_authority import small_dump, write_xml
from serving import LiveServer
from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.errors import ModelFormatError
from tagalign.feedback import FeedbackStore
from tagalign.io import InputReport
from tagalign.project import Project
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.suggest.sources.base import Batch, FitContext
from tagalign.suggest.sources.labels import LabelRetrieval
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary, load_vocabulary
from tiny_models import TOPICS, static_model, tiny_records

PILZE, HOLZSCHUTZ = "4000004-4", "4000002-2"


@pytest.fixture(scope="module")
def gnd(tmp_path_factory) -> Vocabulary:
    """The pymarc-built dump: Pilze with the alternative label Mykologie, Holzschutz with
    Holzkonservierung and Holzschutzverfahren, Bank <Möbel> with Sitzbank."""
    path = write_xml(tmp_path_factory.mktemp("gnd") / "dump.mrc.xml.gz", small_dump(), gz=True)
    return load_vocabulary(path, report=InputReport(stream=io.StringIO()))  # one bad record


def without_alts(vocab: Vocabulary) -> Vocabulary:
    return Vocabulary(dataclasses.replace(s, alt_labels={}) for s in vocab)


# -- the lexical source --------------------------------------------------------------------
def test_lexical_source_finds_a_subject_by_its_alternative_label(gnd):
    an = Analyzer()
    m = LabelMatcher()
    m.fit(FitContext(gnd, an))
    recs = [Record(id="a", title="Mykologie der Wälder", language="de"),
            Record(id="b", title="Pilze im Holzschutz", language="de"),
            Record(id="c", title="Verfahren der Holzkonservierung", language="de")]
    batch = Batch.tokenised(recs, an)
    c = m.candidates(batch)
    pairs = {(r, gnd.subjects[p].id): f for r, p, f in zip(c.rows.tolist(), c.cols.tolist(),
                                                           c.feats.tolist(), strict=True)}
    assert set(pairs) == {(0, PILZE), (1, PILZE), (1, HOLZSCHUTZ), (2, HOLZSCHUTZ)}
    assert pairs[(0, PILZE)][4] == 0.0 and pairs[(1, PILZE)][4] == 1.0  # lex_pref
    pos = gnd.position(PILZE)
    assert m.reasons(batch, 0, [pos]) == {pos: {"label_match": "Pilze",
                                                "matched": "Mykologie"}}
    assert m.reasons(batch, 1, [pos]) == {pos: {"label_match": "Pilze"}}  # preferred found
    hs = gnd.position(HOLZSCHUTZ)
    assert m.reasons(batch, 2, [hs])[hs]["matched"] == "Holzkonservierung"
    # the same vocabulary without them: the alternative label finds nothing
    plain = LabelMatcher()
    plain.fit(FitContext(without_alts(gnd), an))
    assert plain.candidates(Batch.tokenised(recs[:1], an)).rows.size == 0


# -- the label source ----------------------------------------------------------------------
ALTS = {"4046076-9": ["mushroom mould"], "4025741-1": ["beam coating", "Holzschutzmittel"]}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> StaticEmbeddingEncoder:
    return StaticEmbeddingEncoder.load(static_model(tmp_path_factory.mktemp("m") / "s",
                                                    dim=32))


def topics(alts: bool) -> Vocabulary:
    return Vocabulary(Subject(sid, {"de": label, "en": words.split()[0]},
                              {"en": ALTS[sid]} if alts and sid in ALTS else {})
                      for sid, (label, words) in TOPICS.items())


def fitted(vocab: Vocabulary, encoder, top_k: int = 5) -> LabelRetrieval:
    src = LabelRetrieval(top_k=top_k, index="flat", title_top_k=0)  # the text query
    src.fit(FitContext(vocab, Analyzer(), encoder=encoder))
    return src


def query(encoder, *texts: str) -> Batch:
    recs = [Record(id=str(i), title=t, language="en") for i, t in enumerate(texts)]
    return Batch(recs, ["en"] * len(recs), embeddings=encoder.encode(list(texts)))


def test_label_source_finds_a_subject_by_its_alternative_label(encoder, tmp_path):
    vocab = topics(alts=True)
    src = fitted(vocab, encoder)
    assert len(src.index_) == len(vocab) + 3  # one row per alternative label
    batch = query(encoder, "mushroom mould", "beam coating")
    c = src.candidates(batch)
    pilze, holz = vocab.position("4046076-9"), vocab.position("4025741-1")
    first = [int(c.cols[c.rows == r][0]) for r in (0, 1)]
    assert first == [pilze, holz]
    assert np.allclose(c.feats[[0, 5], 0], 1.0, atol=1e-5)  # the label's own vector
    for r in (0, 1):  # each subject once per record, however many of its rows were near
        assert len(set(c.cols[c.rows == r].tolist())) == (c.rows == r).sum() == 5
    assert src.reasons(batch, 0, [pilze, holz]) == {pilze: {"matched": "mushroom mould"}}
    # without the alternative labels the record is far from every label
    plain = fitted(topics(alts=False), encoder).candidates(query(encoder, "mushroom mould"))
    assert plain.feats[0, 0] < 0.99
    # a narrower candidate count is the first part of a wider one (tuning truncates)
    wide = fitted(vocab, encoder, top_k=8).candidates(batch)
    narrow = c
    trunc = wide.truncate(5)
    assert np.array_equal(trunc.cols, narrow.cols)
    assert np.allclose(trunc.feats, narrow.feats, equal_nan=True)
    # saved and loaded: the same candidates and reasons
    src.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alt-labels.json", "alt-owners.npy",
                                                          "index"]
    back = LabelRetrieval(top_k=5, index="flat")
    back.load_state(tmp_path, FitContext(vocab, Analyzer()))
    again = back.candidates(batch)
    assert np.array_equal(again.cols, c.cols)
    assert np.array_equal(again.feats, c.feats, equal_nan=True)
    assert back.reasons(batch, 0, [pilze]) == {pilze: {"matched": "mushroom mould"}}
    (tmp_path / "alt-owners.npy").unlink()
    with pytest.raises(ModelFormatError, match="retrain"):
        LabelRetrieval(top_k=5).load_state(tmp_path, FitContext(vocab, Analyzer()))


def test_without_alternative_labels_the_label_source_is_as_before(encoder, tmp_path):
    vocab = topics(alts=False)
    src = fitted(vocab, encoder)
    assert len(src.index_) == len(vocab)
    batch = query(encoder, "mushroom mould", "epic hero", "Digitalisierung")
    c = src.candidates(batch)
    # what the source returned before alternative labels: the index's hits as they are
    sims, pos = src.index_.search(np.ascontiguousarray(batch.embeddings), 5)
    assert np.array_equal(c.cols, pos.ravel()) and np.array_equal(c.feats[:, 0], sims.ravel())
    assert "labels" not in batch.evidence and src.reasons(batch, 0, [0]) == {}
    src.save(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["index"]
    back = LabelRetrieval(top_k=5, index="flat")
    back.load_state(tmp_path, FitContext(vocab, Analyzer()))
    assert np.array_equal(back.candidates(batch).feats, c.feats, equal_nan=True)


# -- the lexical recipe and the page's subject search over HTTP ----------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory, gnd):
    root: Path = tmp_path_factory.mktemp("proj")
    project = Project.create(root / "gnd", gnd, "lexical")
    project.train(tiny_records(10))
    app = create_app({"gnd": project}, FeedbackStore.for_project(root / "gnd"))
    with LiveServer(app) as live:
        yield live


def test_page_search_and_suggestions_by_alternative_label(served):
    api = f"{served.url}/tagalign/v1/projects/gnd"
    got = httpx.get(f"{api}/subjects", params={"prefix": "mykol"}).json()["subjects"]
    assert [(x["id"], x["label"], x["matched"], x["language"]) for x in got] == [
        (PILZE, "Pilze", "Mykologie", "de")]
    got = httpx.get(f"{api}/subjects", params={"prefix": "sitz"}).json()["subjects"]
    assert [(x["id"], x["label"], x["matched"]) for x in got] == [
        ("4000001-1", "Bank <Möbel>", "Sitzbank")]
    res = httpx.post(f"{api}/suggest", json={"title": "Mykologie der Wälder",
                                            "language": "de", "limit": 3})
    assert res.status_code == 200, res.text
    results = res.json()["results"]
    assert results[0]["id"] == PILZE and results[0]["label"] == "Pilze"
    assert results[0]["reasons"] == {"sources": ["lexical"], "label_match": "Pilze",
                                     "matched": "Mykologie"}


def test_label_rows_made_in_chunks_are_the_rows_made_at_once(encoder, gnd):
    """Issue 48: the label index's rows are made as its build asks for them, a chunk at a
    time (a 1.5M-heading vocabulary's 2.86M rows, the encoder's batches and the norm's
    temporaries were held at once); each row, asked for in any company, is bit for bit the
    row of one call over all texts (the subjects': German plus English label, normalised)."""
    from tagalign.suggest.sources.labels import subject_rows, text_rows

    texts = [f"{w} {v}" for w in ("timber", "mould", "epic", "neural", "ethics")
             for v in ("beam", "song", "data", "truth", "decay", "hero", "wood")]
    once = np.asarray(encoder.encode(texts), np.float32)
    once /= np.linalg.norm(once, axis=1, keepdims=True).clip(1e-9)
    rows = text_rows(encoder, texts, chunk=4)
    chunked = np.concatenate(list(rows.chunks()))
    assert chunked.shape == once.shape == (35, 32)
    np.testing.assert_array_equal(chunked, once)
    np.testing.assert_array_equal(rows[np.array([3, 17, 30])], once[[3, 17, 30]])

    vocab = Vocabulary([*gnd, Subject("x-en", {"de": "Epos", "en": "epic"})])
    subjects = vocab.subjects
    de = np.asarray(encoder.encode([s.label("de") for s in subjects]), np.float32)
    en_pos = [i for i, s in enumerate(subjects) if "en" in s.labels]
    de[en_pos] += encoder.encode([subjects[i].labels["en"] for i in en_pos])
    de /= np.linalg.norm(de, axis=1, keepdims=True).clip(1e-9)
    made = subject_rows(vocab, encoder, chunk=2)
    np.testing.assert_array_equal(np.concatenate(list(made.chunks())), de)
    np.testing.assert_array_equal(made[np.array([len(de) - 1, 0])], de[[-1, 0]])


@pytest.mark.slow  # 12,000 subjects encoded and clustered: seconds
def test_a_label_index_of_many_rows_is_stored_compressed(encoder, tmp_path):
    """Issue 48: an ``ivf`` label index of ``compress_rows`` rows or more stores one byte a
    dimension (``ivfsq8``: 4.2 GiB → 1.05 GiB for a 1.5M-heading vocabulary, dev avg R
    unchanged); fewer rows, ``compress_rows=None`` or another kind stay as asked. Built on
    12,000 subjects (the index clusters from 10,000 rows; labels repeat), each label finding a
subject of its own;
    saved and loaded compressed."""
    import faiss

    words = ("timber", "mould", "epic", "neural", "ethics", "beam", "song", "data", "truth",
             "decay", "hero", "wood")
    names = [f"{a} {b} {c}" for a in words for b in words for c in words]
    vocab = Vocabulary(Subject(f"s{i}", {"de": names[i % len(names)]}) for i in range(12_000))
    src = LabelRetrieval(top_k=5, index="ivf", compress_rows=12_000, title_top_k=0)
    src.fit(FitContext(vocab, Analyzer(), encoder=encoder))
    assert src.index_.kind == "ivfsq8"
    assert isinstance(src.index_.index_, faiss.IndexIVFScalarQuantizer)
    asked = [names[7], names[1000]]
    batch = query(encoder, *asked)
    c = src.candidates(batch)
    for r, text in enumerate(asked):  # the best: a subject of those words (a static
        first = int(np.flatnonzero(c.rows == r)[0])  # encoder ignores their order), at ≈ 1
        assert sorted(vocab.subjects[int(c.cols[first])].label("de").split()) == \
            sorted(text.split())
        assert c.feats[first, 0] > 0.98
    src.save(tmp_path)
    back = LabelRetrieval(top_k=5)
    back.load_state(tmp_path, FitContext(vocab, Analyzer()))
    assert back.index_.kind == "ivfsq8"
    assert np.array_equal(back.candidates(batch).cols, c.cols)
    for cfg, rows, kind in (({}, 283_000, "ivf"), ({}, 2_857_302, "ivfsq8"),
                            ({"compress_rows": None}, 2_857_302, "ivf"),
                            ({"index": "flat"}, 2_857_302, "flat"),
                            ({"index": "ivfpq"}, 2_857_302, "ivfpq")):
        assert LabelRetrieval(top_k=5, **cfg).index_kind(rows) == kind
