"""Held-out evidence (issue 34): what the hybrid said of the training records its ranker
held out (split B), kept with the model, and the domain stacker learning from those records
besides the dev records — honestly: the text model never learns them and their subject
profiles leave their own counts out."""

from __future__ import annotations

import numpy as np
import pytest

from tagalign.classify import Classifier, Example, get_classifier
from tagalign.classify.profiles import SubjectEvidence
from tagalign.project import Project
from tagalign.project.domains import held_out_examples
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.suggest.held_out import HeldOutEvidence
from tagalign.train.stacking import in_holdout
from tiny_models import TINY_HYBRID, TOPICS, tiny_records, tiny_vocab

DOMAIN = dict(zip(TOPICS, ["lit", "inf", "bau", "bau", "lit", "inf", "inf", "bau"], strict=True))


@pytest.fixture(scope="module")
def project(tiny_hybrid):
    return Project.load(tiny_hybrid)


def test_the_hybrid_keeps_its_out_of_fold_lists_for_split_b(project):
    params = {**HybridRecipe.defaults, **TINY_HYBRID}
    records = tiny_records(120, seed=0)
    split_b = [r.id for r in records if in_holdout(r.id, params["holdout_fraction"],
                                                  params["seed"])]
    evidence = project.trained_recipe().held_out_evidence()
    assert evidence.ids == split_b and len(split_b) >= 15
    assert evidence.depth == params["held_out_depth"]
    gold = {r.id: set(r.subjects) for r in records}
    top1 = []
    for rid, row, nbrs in zip(evidence.ids, evidence.suggested, evidence.neighbours,
                              strict=True):
        scores = [s for _, s in row]
        assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
        assert {sid for sid, _ in row} <= set(TOPICS)
        top1.append(row[0][0] in gold[rid])
        # the neighbours were found in split A's memory: never a B record, never itself
        assert set(nbrs) == {"tfidf_knn"} and nbrs["tfidf_knn"]
        assert not {n for n, _ in nbrs["tfidf_knn"]} & set(split_b)
    assert np.mean(top1) > 0.8  # real rankings of the tiny topics
    # saved with the model, read back alike, no pickle
    folder = project.path / "model" / "held-out"
    assert sorted(p.name for p in folder.iterdir()) == ["evidence.json", "records.jsonl.gz"]
    again = HeldOutEvidence.load(folder)
    assert again.ids == evidence.ids and again.neighbours == evidence.neighbours
    assert [[s for s, _ in row] for row in again.suggested] == \
        [[s for s, _ in row] for row in evidence.suggested]


def test_a_hybrid_trained_without_it_keeps_none(tmp_path):
    p = Project.create(tmp_path / "p", tiny_vocab(), "hybrid",
                       {**TINY_HYBRID, "held_out_evidence": False})
    p.train(tiny_records(120, seed=0))
    assert not (tmp_path / "p" / "model" / "held-out").exists()
    assert Project.load(tmp_path / "p").trained_recipe().held_out_evidence() is None


def test_held_out_examples_are_the_training_examples_the_project_held_out(project):
    train = [Example(r.id, r.text, sorted({DOMAIN[s] for s in r.subjects}), r.language,
                     subjects=list(r.subjects)) for r in tiny_records(160, seed=0)]
    evidence = project.trained_recipe().held_out_evidence()
    got = held_out_examples(project, train[:100], depth=5)
    assert [ex.id for ex in got] == [i for i in evidence.ids if int(i[1:]) < 100]
    assert all(len(ex.suggested) == 5 and ex.neighbours["tfidf_knn"] for ex in got)
    assert got[0].text == next(ex.text for ex in train if ex.id == got[0].id)
    # a stacker reading deeper lists than the project kept learns on none of them
    assert held_out_examples(project, train, depth=evidence.depth + 1) == []


def test_profiles_leave_a_training_records_own_counts_out():
    vocab = tiny_vocab()
    ids = list(TOPICS)
    # record 0 alone carries subject 0; records 0-2 carry subject 1
    subjects = [[ids[0], ids[1]], [ids[1]], [ids[1]]]
    domains = np.array([[1, 0], [0, 1], [0, 1]], np.float32)
    evidence = SubjectEvidence.fit(vocab, subjects, domains, top_k=2)
    suggested = [[(ids[0], 0.9), (ids[1], 0.5)]]
    X = evidence.features(np.full((1, 2), 0.5, np.float32), suggested)
    assert X[0, :, 7].tolist() == [2, 2]  # both suggestions have a profile
    np.testing.assert_allclose(X[0, :, 4], [1.0, 0.0])  # top subject: record 0's domain
    own = evidence.own(subjects[:1], domains[:1])
    X = evidence.features(np.full((1, 2), 0.5, np.float32), suggested, own)
    assert X[0, :, 7].tolist() == [1, 1]  # subject 0 had only record 0: no profile left
    np.testing.assert_allclose(X[0, :, 2], [0.0, 1.0])  # subject 1 without record 0


def examples(n: int, seed: int, prefix: str, word: str | None = None) -> list[Example]:
    """Tiny examples with their gold subjects as suggestions; ``word``: in every text."""
    out = []
    for i, r in enumerate(tiny_records(n, seed)):
        text = r.text + (f" {word}" if word else "")
        ex = Example(f"{prefix}{i}", text, sorted({DOMAIN[s] for s in r.subjects}),
                     r.language, subjects=list(r.subjects))
        ex.suggested = [(s, 0.9 - 0.2 * j) for j, s in enumerate(r.subjects)]
        out.append(ex)
    return out


@pytest.mark.parametrize("use", [True, False])
def test_the_stacker_learns_the_held_out_records_and_the_text_model_never(use, tmp_path):
    train, dev = examples(120, 0, "t"), examples(60, 1, "d")
    held = examples(40, 2, "h", word="quokkaword")  # a word only held-out records have
    clf = get_classifier("subjects-stack", text_recipe="linear", rounds=20, held_out=use)
    clf.bind(tiny_vocab())
    clf.fit(train + held, dev, held_out_examples=held)
    vocabulary = clf.text_.tfidf_.vectorizers_["all"].vocabulary_
    assert ("quokkaword" in vocabulary) is not use
    assert clf.held_out_records_ == (40 if use else 0)
    assert clf.tuning_scores_.shape == (60, len(clf.labels_))  # only dev is scored
    clf.save(tmp_path / "m")
    assert Classifier.load(tmp_path / "m").held_out_records_ == clf.held_out_records_


def test_the_held_out_records_change_what_the_stacker_learns():
    """The dev records alone say the text decides; the held-out records say the subjects
    do (their suggestions are right, their texts point elsewhere): the stacker learned on
    both trusts the subjects more."""
    train, dev = examples(160, 0, "t"), examples(60, 1, "d")
    held = examples(200, 2, "h")
    for ex in held:  # texts of another topic than their subjects
        ex.text = tiny_records(1, seed=int(ex.id[1:]) + 999)[0].text
    probs = {}
    for use in (False, True):
        clf = get_classifier("subjects-stack", text_recipe="linear", stacker="logistic",
                             held_out=use)
        clf.bind(tiny_vocab())
        clf.fit(train + held, dev, held_out_examples=held)
        coef = clf.stacker_.coef_ * 1.0
        probs[use] = coef[:, 2] / (np.abs(coef[:, 0]) + 1e-9)  # subjects vs text weight
    assert np.median(probs[True]) > np.median(probs[False])
