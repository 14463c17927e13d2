"""The hybrid's `domains` source: predicted record domains vs each subject's domain profile.

Tiny data built here: the eight topics of `tiny_models` fall into three domains; every record
carries two subjects of one domain and that domain as its gold `domains`.
"""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest

from suggesting import suggestions
from tagalign.classify import LabelSetMismatch
from tagalign.classify.source import DomainSource
from tagalign.project import Project
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.records import Record
from tagalign.suggest.fusion import PairFeatures, merge
from tagalign.suggest.sources import Batch, Candidates
from tagalign.suggest.sources.base import FitContext
from tagalign.suggest.sources.memory import label_matrix
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary
from tiny_models import TOPICS, tiny_vocab

DOMAIN_OF = {"4015065-3": "lit", "4045791-6": "lit", "4011455-7": "lit", "4068097-6": "lit",
             "4033447-8": "inf", "4123065-6": "inf", "4046076-9": "bau", "4025741-1": "bau"}
EPOS, PHILOSOPHIE, KI, PILZE = "4015065-3", "4045791-6", "4033447-8", "4046076-9"


def domain_records(n: int, seed: int) -> list[Record]:
    rnd = random.Random(seed)
    groups = {d: sorted(s for s, dd in DOMAIN_OF.items() if dd == d)
              for d in sorted(set(DOMAIN_OF.values()))}
    out = []
    for i in range(n):
        domain = rnd.choice(sorted(groups))
        gold = rnd.sample(groups[domain], 2)
        words = " ".join(rnd.choice(TOPICS[g][1].split()) for g in gold for _ in range(6))
        out.append(Record(id=f"d{seed}-{i}", title=TOPICS[gold[0]][0], abstract=words,
                          language=rnd.choice(["de", "en"]), subjects=gold, domains=[domain]))
    return out


def batch_of(records: list[Record]) -> Batch:
    an = Analyzer()
    langs = [r.language or "en" for r in records]
    return Batch(records, langs, [an.tokens(r.text, lg) for r, lg in zip(records, langs,
                                                                         strict=True)])


def fitted(vocab: Vocabulary, n: int = 150, **params) -> DomainSource:
    recs = domain_records(n, seed=0)
    src = DomainSource(**params)
    src.fit(FitContext(vocab, Analyzer(), records=recs, Y=label_matrix(recs, vocab)))
    return src


LIT_QUERY = Record(id="q-lit", title="Heroic saga", language="en",
                   abstract="epic poem verse hero song ethics truth reason")
INF_QUERY = Record(id="q-inf", title="Machine learning", language="en",
                   abstract="neural network model data software computer online")


def test_feature_higher_when_profile_agrees_with_record_domains():
    vocab = tiny_vocab()
    src = fitted(vocab)
    assert src.labels_ == ["bau", "inf", "lit"]
    probs = src.record_domains(batch_of([LIT_QUERY, INF_QUERY]))
    assert probs[0].argmax() == 2 and probs[1].argmax() == 1  # the classifier itself works
    feats = src.candidates(batch_of([LIT_QUERY, INF_QUERY]))
    assert isinstance(feats, PairFeatures) and len(feats.rows) == 0  # proposes nothing
    pos = {sid: vocab.positions([sid])[0] for sid in (EPOS, PHILOSOPHIE, KI, PILZE)}
    rows = np.array([0, 0, 0, 1, 1])
    cols = np.array([pos[EPOS], pos[PHILOSOPHIE], pos[KI], pos[KI], pos[EPOS]])
    X = feats.fill(rows, cols)
    match, agree, cos = X[:, 0], X[:, 1], X[:, 2]
    # lit record: the lit subjects' profiles (pure: all their records are lit) agree
    assert match[0] == pytest.approx(1.0) and match[1] == pytest.approx(1.0)
    assert np.isnan(match[2])  # KI was never seen with lit: no "domains" support
    assert agree[0] > agree[2] + 0.3 and agree[1] > agree[2] + 0.3
    assert cos[0] > cos[2] + 0.3
    # and the other way round for the inf record
    assert match[3] == pytest.approx(1.0) and np.isnan(match[4])
    assert agree[3] > agree[4] + 0.3 and cos[3] > cos[4] + 0.3

    # through fusion: the columns are filled for every candidate the other sources propose
    other = Candidates(rows, cols, np.ones((5, 1), np.float32), ["x"])
    mrows, mcols, MX, names = merge([other, feats], len(vocab))
    assert names == ["x", "dom_match", "dom_agree", "dom_cos"]
    assert len(mrows) == 5 and not np.isnan(MX[:, 2]).any()
    # a subject no training record carries has no profile: NaN, not a made-up value
    unseen = Vocabulary([*tiny_vocab(), Subject("9999999-9", {"de": "Neu"})])
    src2 = fitted(unseen)
    out = src2.candidates(batch_of([LIT_QUERY])).fill(np.array([0]), np.array([len(unseen) - 1]))
    assert np.isnan(out).all()


def test_unseen_subject_borrows_profile_by_classification_notation():
    base = list(tiny_vocab())
    by_id = {s.id: s for s in base}
    by_id[EPOS].classification = [("12.1", "Literatur")]
    by_id[KI].classification = [("28", "Informatik")]
    vocab = Vocabulary([*base, Subject("1000000-1", {"de": "Lyrik"}, classification=[
        ("12.1", "Literatur")]), Subject("1000000-2", {"de": "Robotik"},
                                         classification=[("28", "Informatik")])])
    src = fitted(vocab)
    X = src.candidates(batch_of([LIT_QUERY])).fill(
        np.array([0, 0]), np.array(vocab.positions(["1000000-1", "1000000-2"])))
    assert not np.isnan(X[:, 1:]).any()
    assert X[0, 1] > X[1, 1] + 0.2 and X[0, 0] == pytest.approx(1.0) and np.isnan(X[1, 0])


def test_saved_source_loads_and_refuses_another_label_set_or_vocabulary(tmp_path):
    vocab = tiny_vocab()
    src = fitted(vocab)
    src.save(tmp_path)
    assert not list(tmp_path.rglob("*.pkl")) and (tmp_path / "classifier/config.json").exists()
    ctx = FitContext(vocab, Analyzer())
    loaded = DomainSource()
    loaded.load_state(tmp_path, ctx)
    batch = batch_of([LIT_QUERY, INF_QUERY])
    rows, cols = np.array([0, 0, 1]), np.array([0, 2, 5])
    np.testing.assert_array_equal(src.candidates(batch).fill(rows, cols),
                                  loaded.candidates(batch).fill(rows, cols))
    with pytest.raises(LabelSetMismatch, match="another label set"):
        DomainSource(labels=["bau", "inf", "lit", "mat"]).load_state(tmp_path, ctx)
    with pytest.raises(ValueError, match="another vocabulary"):
        DomainSource().load_state(tmp_path, FitContext(
            Vocabulary([*vocab, Subject("9999999-9", {"de": "Neu"})]), Analyzer()))
    meta = json.loads((tmp_path / "domains.json").read_text())  # classifier ≠ profiles
    (tmp_path / "domains.json").write_text(json.dumps({**meta, "labels": ["bau", "inf", "mat"]}))
    with pytest.raises(LabelSetMismatch):
        DomainSource().load_state(tmp_path, ctx)


def test_hybrid_with_domains_save_load_identical_and_default(tmp_path):
    assert HybridRecipe.defaults["domains"] is False  # off by default: see README ablation
    vocab = tiny_vocab()
    params = {"sources": ["omikuji", "tfidf_knn", "lexical"], "domains": True,
              "holdout_fraction": 0.3, "ranker_rounds": 30, "knn_k": 10}
    proj = Project.create(tmp_path / "p", vocab, "hybrid", params)
    proj.train(domain_records(240, seed=1))
    assert "domains" in json.loads((tmp_path / "p/model/hybrid.json").read_text())["sources"]
    assert "dom_agree" in proj.recipe.pipeline.ranker.feature_names_
    queries = domain_records(30, seed=2)
    a = suggestions(proj, queries, limit=5)
    assert any("domains" in s.reasons["sources"] for row in a for s in row)
    shutil.copytree(tmp_path / "p", tmp_path / "copy")
    b = suggestions(Project.load(tmp_path / "copy"), queries, limit=5)
    assert [[(s.id, round(s.score, 6), s.reasons["sources"]) for s in row] for row in a] == \
        [[(s.id, round(s.score, 6), s.reasons["sources"]) for s in row] for row in b]
