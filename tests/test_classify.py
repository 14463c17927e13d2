"""Multi-label classification (`tagalign.classify`, `tagalign classify`): HeroCon, phases,
contrast sampler, thresholds, save/load, CLI round trip, records without labels."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tagalign.classify import (
    Classifier,
    Example,
    LabelSetMismatch,
    get_classifier,
    read_examples,
)
from tagalign.classify.label_contrastive import contrast_batches
from tagalign.classify.losses import HeroConLoss, herocon
from tagalign.classify.metrics import micro_f1, report
from tagalign.classify.thresholds import decide, tune
from tagalign.cli import app
from tagalign.records import InputReport
from tiny_models import TOPICS, tiny_bert, tiny_records

DOMAIN = dict(zip(TOPICS, ["lit", "inf", "bio", "bau", "phi", "inf", "soz", "arc"],
                  strict=True))


def domain_examples(n: int = 120, seed: int = 0) -> list[Example]:
    return [Example(r.id, r.text, sorted({DOMAIN[s] for s in r.subjects}), r.language)
            for r in tiny_records(n, seed)]


def write_records(path, examples, drop_labels_of: set[str] = frozenset()):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for ex in examples:
            title, _, abstract = ex.text.partition(" ")
            obj = {"id": ex.id, "lang": ex.language, "title": title, "abstract": abstract}
            if ex.id not in drop_labels_of:
                obj["domains"] = ex.labels
            fh.write(json.dumps(obj) + "\n")
    return path


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("bert"))


def mcpt(bert, **kw):
    params = {"base_model": f"st:{bert}", "lr_body": 1e-3, "epochs_head": 6,
              "epochs_contrastive": 4, "epochs_post": 4, "max_seq_length": 64,
              "per_language": False, **kw}
    return get_classifier("label-contrastive", **params)


# -- HeroCon -----------------------------------------------------------------------------

def test_herocon_equals_the_hand_computed_value():
    r = 1 / math.sqrt(2)
    # cosines: c12=0, c13=r, c14=-1, c23=r, c24=0, c34=-r (lengths must not matter)
    emb = torch.tensor([[2.0, 0], [0, 1], [3 * r, 3 * r], [-0.5, 0]])
    y = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 1, 1], [0, 0, 1]])
    e = math.exp

    def term(num, neg, n_neg):  # −log(σf / δ), δ = (σf + Σ γ f) / (|N| + 1)
        return -math.log(num / ((num + neg) / (n_neg + 1)))

    # Hamming: h12=1 h13=2 h14=3 h23=3 h24=2 h34=1; σ = 1 − h/3, γ = h
    class0 = (term(2 / 3, 2 * e(r) + 3 * e(-1), 2) + term(2 / 3, 3 * e(r) + 2 * e(0), 2)) / 2
    class1 = (term(e(r) / 3, 1 * e(0) + 3 * e(-1), 2) + term(e(r) / 3, 3 * e(r) + e(-r), 2)) / 2
    class2 = (term(2 / 3 * e(-r), 2 * e(r) + 3 * e(r), 2)
              + term(2 / 3 * e(-r), 3 * e(-1) + 2 * e(0), 2)) / 2
    hand = (class0 + class1 + class2) / 3
    assert hand == pytest.approx(1.29075108, abs=1e-7)
    assert float(herocon(emb, y)) == pytest.approx(hand, abs=1e-5)


def test_herocon_is_zero_without_positive_pairs_and_loss_module_embeds(bert):
    from sentence_transformers import SentenceTransformer

    emb = torch.randn(3, 4, requires_grad=True)
    value = herocon(emb, torch.eye(3))
    assert float(value.detach()) == 0.0
    value.backward()  # still part of the graph
    model = SentenceTransformer(str(bert), device="cpu")
    loss = HeroConLoss(model)
    feats = model.preprocess(["epic hero poem", "epic verse saga", "fungi wood rot"])
    out = loss([feats], torch.tensor([[1, 0], [1, 0], [0, 1]]))
    assert out.requires_grad and float(out.detach()) > 0


def _herocon_by_hand(vectors: list[list[float]], labels: list[list[int]], tau: float) -> float:
    """The docstring's formula, term by term in plain floats."""
    n, n_classes = len(vectors), len(labels[0])

    def cos(a, b):
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    def f(i, j):
        return math.exp(cos(vectors[i], vectors[j]) / tau)

    def ham(i, j):
        return sum(a != b for a, b in zip(labels[i], labels[j], strict=True))

    per_class = []
    for c in range(n_classes):
        pos = [i for i in range(n) if labels[i][c]]
        neg = [k for k in range(n) if not labels[k][c]]
        if len(pos) < 2:
            continue
        terms = []
        for i in pos:
            for j in pos:
                if i == j:
                    continue
                num = (1 - ham(i, j) / n_classes) * f(i, j)
                delta = (num + sum(ham(i, k) * f(i, k) for k in neg)) / (len(neg) + 1)
                terms.append(-math.log(num / delta))
        per_class.append(sum(terms) / len(terms))
    return sum(per_class) / len(per_class)


def test_herocon_value_and_gradient_match_the_formula_at_temperature_half():
    """Another hand example (τ = 0.5, a class with one positive, which is left out) and
    the gradient: non-zero, and equal to central differences of the hand formula."""
    vectors = [[1.0, 0.2, 0.0], [0.3, 1.0, -0.4], [0.9, 0.8, 0.1], [-0.5, 0.1, 1.0]]
    labels = [[1, 0, 1, 0], [1, 1, 0, 0], [0, 1, 1, 0], [1, 1, 0, 1]]
    emb = torch.tensor(vectors, dtype=torch.float64, requires_grad=True)
    value = herocon(emb, torch.tensor(labels), temperature=0.5)
    hand = _herocon_by_hand(vectors, labels, 0.5)
    assert float(value) == pytest.approx(hand, rel=1e-9)
    assert hand > 0.1
    value.backward()
    grad = emb.grad.numpy()
    assert np.abs(grad).max() > 1e-3
    eps = 1e-6
    numeric = np.zeros_like(grad)
    for i in range(len(vectors)):
        for d in range(len(vectors[0])):
            up = [row[:] for row in vectors]
            down = [row[:] for row in vectors]
            up[i][d] += eps
            down[i][d] -= eps
            numeric[i, d] = (_herocon_by_hand(up, labels, 0.5)
                             - _herocon_by_hand(down, labels, 0.5)) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, atol=1e-6)


def test_contrastive_phase_optimises_herocon(bert):
    """Phase two with α = 1 against α = 0, same seed: its logged loss carries the HeroCon
    term (about 1.3 here) and the body it trains has a lower HeroCon on the training texts
    than the BCE-only body (which leaves HeroCon where the untrained body had it). A
    HeroCon that returned 0 would make both runs the same and fail here."""
    from sentence_transformers import SentenceTransformer

    examples = domain_examples(48, 0)
    train = examples[:40]

    def run(alpha: float):
        return mcpt(bert, alpha=alpha, epochs_head=1, epochs_contrastive=3, epochs_post=1,
                    seed=0).fit(train, examples[40:])

    def herocon_of(body, label_names) -> float:
        body.eval()
        with torch.no_grad():
            emb = body(body.preprocess([ex.text for ex in train]))["sentence_embedding"]
        y = torch.tensor([[float(name in ex.labels) for name in label_names] for ex in train])
        return float(herocon(emb, y))

    plain, hero = run(0.0), run(1.0)
    names = plain.labels_.labels
    assert hero.labels_.labels == names
    untrained = herocon_of(SentenceTransformer(str(bert), device="cpu"), names)
    with_hero = herocon_of(hero.models_["*"][0], names)
    without = herocon_of(plain.models_["*"][0], names)
    assert with_hero < without - 0.03 and with_hero < untrained - 0.03, (
        with_hero, without, untrained)
    gap = np.subtract(hero.history_["all/contrastive"], plain.history_["all/contrastive"])
    assert (gap > 1.0).all(), gap  # α·HeroCon in the logged loss
    assert hero.history_["all/head-pre"] == plain.history_["all/head-pre"]  # same start


# -- training phases -------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_phase_lowers_its_loss(bert, seed):
    examples = domain_examples(96, seed)
    clf = mcpt(bert, seed=seed).fit(examples[:72], examples[72:])
    assert set(clf.history_) == {"all/head-pre", "all/contrastive", "all/head-post"}
    for key, losses in clf.history_.items():
        assert losses[-1] < losses[0], (key, losses)


def test_per_language_phase_two_routes_by_language(bert):
    examples = domain_examples(96)
    # target "fr" has no training records: its model keeps training on all of them
    clf = mcpt(bert, per_language=True, languages=["de", "fr"], epochs_head=2,
               epochs_contrastive=1, epochs_post=1).fit(examples[:72], examples[72:])
    assert set(clf.models_) == {"*", "de", "fr"}
    assert {"de/contrastive", "fr/contrastive"} <= set(clf.history_)
    assert clf.models_["de"][0] is not clf.models_["*"][0]
    probe = [Example("x", examples[0].text, [], lang) for lang in ("de", "fr", "en")]
    p = clf.predict_proba(probe)
    assert not np.allclose(p[0], p[1]) and not np.allclose(p[1], p[2])
    # head only (the ablation): one frozen body shared, a head per language
    heads = mcpt(bert, per_language=True, contrastive=False).fit(examples[:72], examples[72:])
    assert set(heads.models_) == {"*", "de", "en"}
    assert heads.models_["de"][0] is heads.models_["*"][0] is heads.models_["en"][0]
    p = heads.predict_proba(probe)
    assert not np.allclose(p[0], p[2]) and np.allclose(p[1], heads.predict_proba(probe[1:2])[0])
    assert set(heads.history_) == {"all/head-pre", "de/head-pre", "en/head-pre"}


def test_contrast_sampler_puts_every_class_in_every_batch():
    for seed in range(5):
        rng = np.random.default_rng(seed)
        y = (rng.random((300, 12)) < 0.08).astype(np.float32)
        y[:, 11] = 0
        y[7, 11] = 1  # a class with a single sample
        present = y.sum(0) > 0
        batches = list(contrast_batches(y, 26, np.random.default_rng(seed)))
        assert len(batches) == math.ceil(300 / 26)
        for b in batches:
            assert len(b) >= 26
            assert ((y[b].sum(0) > 0) == present).all()


# -- thresholds and metrics ------------------------------------------------------------

def test_tuned_thresholds_beat_one_half():
    for seed in range(3):
        rng = np.random.default_rng(seed)
        gold = (rng.random((400, 6)) < 0.25).astype(np.float32)
        gold[np.arange(400), rng.integers(6, size=400)] = 1
        # scores below 0.5 but informative; class 3 scored higher than the rest
        probs = np.where(gold > 0, 0.3, 0.1) + rng.normal(0, 0.06, gold.shape)
        probs[:, 3] += 0.25
        probs = probs.clip(0, 1).astype(np.float32)
        tuned = tune(probs, gold)
        at_half = micro_f1(gold, decide(probs, 0.5))
        assert tuned["dev_micro_f1_global"] > at_half + 0.2
        assert tuned["dev_micro_f1_per_class"] > tuned["dev_micro_f1_global"] + 0.01
        assert tuned["per_class"][3] > tuned["global"]
        assert micro_f1(gold, decide(probs, np.array(tuned["per_class"]))) == \
            pytest.approx(tuned["dev_micro_f1_per_class"])


def test_decide_gives_every_record_a_label_and_metrics_by_hand():
    probs = np.array([[0.1, 0.2, 0.05], [0.9, 0.6, 0.1]], np.float32)
    assert decide(probs, 0.5).tolist() == [[False, True, False], [True, True, False]]
    gold = np.array([[0, 1, 0], [1, 0, 1]])
    pred = np.array([[0, 1, 0], [1, 1, 0]])
    rep = report(gold, pred, ["a", "b", "c"], ["de", "en"])
    # tp=2 fp=1 fn=1 → micro-F1 2·2/(4+1+1); per class F1 a=1, b=2/3, c=0
    assert rep["micro_f1"] == pytest.approx(4 / 6)
    assert rep["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert rep["by_language"]["de"]["micro_f1"] == 1.0
    assert rep["per_class"]["b"] == {"precision": 0.5, "recall": 1.0,
                                     "f1": pytest.approx(2 / 3), "support": 1}


# -- persistence -------------------------------------------------------------------------

def test_save_load_identical_predictions_and_label_set_check(bert, tmp_path):
    examples = domain_examples(96)
    for name, clf in [("linear", get_classifier("linear")),
                      ("ngrams", get_classifier("linear-ngrams", char_chars=40)),
                      ("mcpt", mcpt(bert, epochs_head=2, epochs_contrastive=1,
                                    epochs_post=1, per_language=True))]:
        clf.fit(examples[:72], examples[72:])
        clf.save(tmp_path / name)
        again = Classifier.load(tmp_path / name, labels=clf.labels_.labels)
        np.testing.assert_allclose(again.predict_proba(examples[72:]),
                                   clf.predict_proba(examples[72:]), atol=1e-6)
        assert again.predict(examples[72:]) == clf.predict(examples[72:])
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["labels"] == ["arc", "bau", "bio", "inf", "lit", "phi", "soz"]
        assert "torch" in config["versions"] and config["thresholds"]["tuned_on"] == "dev"
        assert not list((tmp_path / name).rglob("*.pkl"))
        with pytest.raises(LabelSetMismatch, match="missing \\['xyz'\\]"):
            Classifier.load(tmp_path / name, labels=clf.labels_.labels + ["xyz"])


@pytest.mark.parametrize("recipe", ["linear", "linear-ngrams"])
def test_linear_learns_the_tiny_domains(recipe):
    examples = domain_examples(200)
    clf = get_classifier(recipe).fit(examples[:150], examples[150:])
    test = domain_examples(60, seed=9)
    pred = clf.decide(clf.predict_proba(test))
    assert micro_f1(clf.labels_.matrix(test), pred) > 0.9


def test_linear_ngrams_features_and_a_label_without_examples():
    from tagalign.classify import DEFAULT_RECIPE

    assert DEFAULT_RECIPE == "linear-ngrams"
    examples = domain_examples(60)
    clf = get_classifier("linear-ngrams", char_chars=30, char_ngrams=[3, 4])
    clf.fit(examples, labels=["arc", "bau", "bio", "inf", "lit", "phi", "soz", "zzz"])
    words = set(clf.tfidf_.vectorizers_["words"].vocabulary_)
    chars = set(clf.chars_.vectorizers_["chars"].vocabulary_)
    assert any(" " in t for t in words)  # bigrams of stemmed tokens
    assert chars and all(3 <= len(t) <= 4 for t in chars)
    probs = clf.predict_proba(examples[:5])
    assert probs.shape == (5, 8) and (probs[:, 7] < 1e-6).all()  # never seen: never likely
    with pytest.raises(ValueError, match="word_ngrams"):
        get_classifier("linear-ngrams", word_ngrams=3)


def test_the_one_vs_rest_fit_counts_its_labels_and_fits_what_scikit_learn_fits():
    """The step of `classify train` that takes minutes on all records reports a label at
    a time (issue 63), and its models are scikit-learn's ``OneVsRestClassifier``'s: the
    same coefficients; a label on no record gets the constant score it had."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    examples = domain_examples(90)
    events: list[tuple[str, int, int]] = []
    labels = ["arc", "bau", "bio", "inf", "lit", "phi", "soz", "zzz"]
    clf = get_classifier("linear-ngrams", char_chars=30)
    clf.fit(examples, labels=labels, progress=lambda *e: events.append(e))
    fits = [(d, t) for phase, d, t in events if phase == "logistic regression"]
    assert fits == [(d, 8) for d in range(1, 9)]  # "zzz" is on no record: done at once
    rest, _, _ = clf._tuning_records([ex for ex in examples if ex.labels], None)
    x, y = clf._matrix(rest), clf.labels_.matrix(rest)
    ovr = OneVsRestClassifier(LogisticRegression(C=4.0, solver="liblinear", max_iter=1000,
                                                 random_state=0)).fit(x, y.astype(int))
    for j, est in enumerate(ovr.estimators_[:7]):
        np.testing.assert_array_equal(clf.coef_[j], est.coef_.ravel().astype(np.float32))
    assert clf.intercept_[7] == -20.0 and not clf.coef_[7].any()


def test_a_phase_in_a_log_file_says_its_time_left(caplog):
    """Off a terminal (a log file) rich draws the bars only at the end: `PhaseBars` logs
    each phase as the library logs its own, with the time left."""
    import io
    import logging
    import time

    from rich.console import Console
    from rich.progress import Progress

    from tagalign.cli.common import PhaseBars
    from tagalign.encode.base import log_progress

    caplog.set_level(logging.INFO, logger="tagalign")
    report = log_progress(logging.getLogger("tagalign.test"), "labels", 4, every=0.0)
    time.sleep(0.01)
    report(1)
    assert caplog.records[-1].getMessage().startswith("labels: 1/4 (")
    assert caplog.records[-1].getMessage().endswith(" left)")
    bars = PhaseBars(Progress(console=Console(file=io.StringIO(), force_terminal=False)),
                     every=0.0)
    bars("logistic regression", 0, 29)
    time.sleep(0.01)
    bars("logistic regression", 3, 29)
    message = caplog.records[-1].getMessage()
    assert message.startswith("logistic regression: 3/29 (") and message.endswith(" left)")
    terminal = Progress(console=Console(file=io.StringIO(), force_terminal=True))
    assert PhaseBars(terminal).logged is None


# -- input ------------------------------------------------------------------------------

def test_training_record_without_labels_is_reported_and_skipped(tmp_path):
    examples = domain_examples(40)
    path = write_records(tmp_path / "train.jsonl.gz", examples, drop_labels_of={"r3"})
    report_ = InputReport()
    got = read_examples(path, report=report_, require_labels=True)
    assert len(got) == 39 and "r3" not in {ex.id for ex in got}
    assert report_.skipped == [f"{path}: record r3: no labels; skipped for training"]
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"text": "epic hero poem", "labels": ["lit"]}\n'
                     '{"text": "fungi rot", "labels": []}\n{"text": 3}\n', "utf-8")
    report_ = InputReport()
    got = read_examples(plain, report=report_, require_labels=True)
    assert [ex.labels for ex in got] == [["lit"]]
    assert report_.skipped == [f"{plain}:2: no labels; skipped for training",
                               f"{plain}:3: missing 'text'"]


def test_cli_round_trip(tmp_path):
    train = write_records(tmp_path / "train.jsonl.gz", domain_examples(150), {"r5"})
    dev = write_records(tmp_path / "dev.jsonl.gz", domain_examples(50, seed=3))
    runner = CliRunner()
    res = runner.invoke(app, ["classify", "train", str(tmp_path / "m"), "--train", str(train),
                              "--dev", str(dev), "--recipe", "linear", "--param", "C=8"])
    assert res.exit_code == 0, res.output
    assert "record r5: no labels" in res.output
    out = tmp_path / "pred.jsonl"
    res = runner.invoke(app, ["classify", "predict", str(tmp_path / "m"), "--input", str(dev),
                              "--output", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 50 and all(row["labels"] for row in rows)
    assert set(rows[0]["labels"][0]) == {"label", "score"}
    res = runner.invoke(app, ["classify", "eval", str(dev), str(out), "--json"])
    assert res.exit_code == 0, res.output
    scores = json.loads(res.stdout)
    assert scores["micro_f1"] > 0.9 and scores["missing_predictions"] == 0
    assert set(scores["by_language"]) == {"de", "en"}
    labels = tmp_path / "labels.txt"
    labels.write_text("lit\ninf\n", "utf-8")
    res = runner.invoke(app, ["classify", "predict", str(tmp_path / "m"), "--input", str(dev),
                              "--output", str(out), "--label-set", str(labels)])
    assert res.exit_code == 1 and "another label set" in res.output
    res = runner.invoke(app, ["classify", "train", str(tmp_path / "x"), "--train", str(train),
                              "--recipe", "linear", "--param", "nope=1"])
    assert res.exit_code == 1 and "unknown parameter" in res.output
