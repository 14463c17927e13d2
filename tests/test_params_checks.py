"""Checks before loading (issue 23): parameter types and ranges, paths, model kinds; the
classify thresholds without dev, label sets; no library bars in our display."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagalign.classify import Classifier, get_classifier
from tagalign.cli import app
from tagalign.params import ParamError, ParamSpec, Positive, PositiveFloat
from tagalign.project import Project
from test_classify import domain_examples, write_records
from test_pairs import write_comedi
from tiny_models import tiny_bert, tiny_records, tiny_vocab

runner = CliRunner()


class Boom(AssertionError):
    """Raised by whatever a command must not reach (loading a model or project)."""


def boom(*_a, **_k):
    raise Boom("loaded before the arguments were checked")


@pytest.fixture(scope="module")
def comedi(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("comedi")
    write_comedi(root / "train" / "english", n_uses=6)
    write_comedi(root / "dev" / "english", n_uses=6, seed=3)
    return root


# -- item 2: parameters ----------------------------------------------------------------
def test_param_spec_names_parameter_value_and_range():
    spec = ParamSpec("pairs", {"epochs": 10, "lr": 1e-5, "limit_pairs": None, "pooling": "mean"},
                     epochs=Positive, lr=PositiveFloat, limit_pairs=Positive)
    spec.check({"epochs": 1, "lr": 1, "limit_pairs": None, "pooling": "target"})
    for bad, message in (({"epochs": -1}, "parameter epochs=-1: must be >= 1"),
                         ({"lr": 0}, "parameter lr=0: must be > 0"),
                         ({"limit_pairs": 0}, "parameter limit_pairs=0: must be >= 1"),
                         ({"epochs": "3"}, "parameter epochs='3': input should be a valid "
                                           "integer"),
                         ({"pooling": 3}, "parameter pooling=3: input should be a valid str")):
        with pytest.raises(ParamError, match=message):
            spec.check(bad)


def test_an_optional_range_with_a_number_as_default_allows_none():
    """A field declared ``Positive | None`` with a number as its default (the lexical
    source's caps: None means no cap) takes None and is still range-checked, as a part
    config and as the hybrid's parameter."""
    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.sources.lexical import LabelMatcherConfig

    assert LabelMatcherConfig(count_max_records=None, max_key_subjects=None).values()[
        "max_key_subjects"] is None
    for field in ("count_max_records", "max_key_subjects"):
        with pytest.raises(ParamError, match=f"parameter {field}=0: must be >= 1"):
            LabelMatcherConfig(**{field: 0})
    spec = ParamSpec("hybrid", HybridRecipe.defaults, **HybridRecipe.ranges)
    spec.check({"lexical_count_max_records": None})
    with pytest.raises(ParamError, match="lexical_count_max_records=0: must be >= 1"):
        spec.check({"lexical_count_max_records": 0})


@pytest.mark.parametrize("param, message", [
    ("epochs=-1", "parameter epochs=-1: must be >= 0"),  # 0: the untuned floor
    ("batch_size=0", "parameter batch_size=0: must be >= 1"),
    ("max_seq_length=-5", "parameter max_seq_length=-5: must be >= 1")])
def test_pairs_train_refuses_a_bad_value_before_loading(comedi, tmp_path, monkeypatch,
                                                        param, message):
    monkeypatch.setattr("tagalign.pairs.data.load_pairs", boom)
    res = runner.invoke(app, ["pairs", "train", str(tmp_path / "m"), "--train",
                              str(comedi / "train"), "--dev", str(comedi / "dev"),
                              "--param", param])
    assert res.exit_code == 2, res.stderr
    assert message in res.stderr and not (tmp_path / "m").exists()


def test_classify_and_tagging_train_refuse_bad_values_before_loading(tmp_path, monkeypatch):
    train = write_records(tmp_path / "t.jsonl.gz", domain_examples(30))
    monkeypatch.setattr("tagalign.classify.read_examples", boom)
    res = runner.invoke(app, ["classify", "train", str(tmp_path / "c"), "--train", str(train),
                              "--recipe", "linear", "--param", "limit_train=-5"])
    assert res.exit_code == 2 and "parameter limit_train=-5: must be >= 1" in res.stderr
    # the vocabulary file does not exist: the value is refused before it is looked for
    res = runner.invoke(app, ["train", str(tmp_path / "p"), "--vocab", str(tmp_path / "v.tsv"),
                              "--train", str(train), "--recipe", "hybrid",
                              "--param", "holdout_fraction=1.5"])
    assert res.exit_code == 2
    assert "parameter holdout_fraction=1.5: must be < 1" in res.stderr
    res = runner.invoke(app, ["train", str(tmp_path / "p"), "--vocab", str(tmp_path / "v.tsv"),
                              "--train", str(train), "--param", "nope=1"])
    assert res.exit_code == 1 and "has no parameter(s) ['nope']" in res.stderr


def test_every_published_default_passes_its_own_check():
    from tagalign.classify import CLASSIFIERS
    from tagalign.pairs.params import DEFAULTS, check_params
    from tagalign.recipes import get_recipe, recipe_names

    for name in recipe_names():
        cls = get_recipe(name)
        cls.check_params(dict(cls.defaults))
    for cls in CLASSIFIERS.values():
        cls.check_params(dict(cls.defaults))
    check_params(dict(DEFAULTS))


# -- item 9: paths and choices before loading -------------------------------------------
def test_bad_paths_and_choices_fail_before_loading(comedi, tmp_path, monkeypatch):
    monkeypatch.setattr("tagalign.pairs.data.load_pairs", boom)
    monkeypatch.setattr(Project, "load", boom)
    nodir = str(tmp_path / "nodir")
    pairs = ["pairs", "train", str(tmp_path / "m"), "--train", str(comedi / "train")]
    res = runner.invoke(app, [*pairs, "--dev", nodir])
    assert res.exit_code == 1 and f"--dev {nodir} not found" in res.stderr
    res = runner.invoke(app, [*pairs, "--dev", str(comedi / "dev"), "--loss", "foo"])
    assert res.exit_code == 1 and "unknown loss 'foo'" in res.stderr
    res = runner.invoke(app, ["pairs", "predict", str(tmp_path), "--input", nodir,
                              "--output", str(tmp_path / "o")])
    assert res.exit_code == 1 and f"--input {nodir} not found" in res.stderr
    res = runner.invoke(app, ["suggest", str(tmp_path), "--input", str(tmp_path / "nope.jsonl"),
                              "--output", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 1 and "records not found" in res.stderr


# -- item 8: a model folder of the wrong kind ---------------------------------------------
def test_a_model_folder_of_the_wrong_kind_names_its_kind_and_command(tmp_path, monkeypatch):
    clf = get_classifier("linear", min_df=1).fit(domain_examples(60), domain_examples(20, 2))
    clf.save(tmp_path / "clf")
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    (pairs / "config.json").write_text(json.dumps({"recipe": "ordinal-wic", "params": {},
                                                   "markers": ["<t>", "</t>"]}))
    (pairs / "thresholds.json").write_text("{}")
    monkeypatch.setattr("tagalign.pairs.model.load_st_model", boom)
    src = write_records(tmp_path / "in.jsonl.gz", domain_examples(5))
    res = runner.invoke(app, ["classify", "predict", str(pairs), "--input", str(src),
                              "--output", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 1
    assert "holds a pairs model, read by `tagalign pairs predict`, not a classifier" \
        in res.stderr
    comedi_in = tmp_path / "c"
    write_comedi(comedi_in / "english", n_uses=4, labels=False)
    res = runner.invoke(app, ["pairs", "predict", str(tmp_path / "clf"), "--input",
                              str(comedi_in), "--output", str(tmp_path / "o")])
    assert res.exit_code == 1
    assert "holds a classifier, read by `tagalign classify predict`, not a pairs model" \
        in res.stderr


# -- items 3 and 7: thresholds without dev, label sets ------------------------------------
def test_classify_train_without_dev_tunes_on_held_out_records(tmp_path):
    train = write_records(tmp_path / "t.jsonl.gz", domain_examples(100))
    res = runner.invoke(app, ["classify", "train", str(tmp_path / "m"), "--train", str(train),
                              "--recipe", "linear", "--param", "min_df=1"])
    assert res.exit_code == 0, res.stderr
    assert "no --dev: thresholds tuned on 10 held-out training records" in res.stderr
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    th = config["thresholds"]
    assert th["tuned_on"] == "holdout" and th["tuned_on_records"] == 10
    assert "dev_scores" not in config and not any(k.startswith("dev_") for k in th)
    assert 0 < th["holdout_micro_f1_per_class"] <= 1


def test_classify_label_set_keeps_labels_without_examples(tmp_path):
    train = write_records(tmp_path / "t.jsonl.gz", domain_examples(80))
    labels = sorted({lab for ex in domain_examples(80) for lab in ex.labels})
    full = tmp_path / "domains.csv"
    full.write_text("code,name\n" + "".join(f"{lab},x\n" for lab in [*labels, "zzz"]))
    res = runner.invoke(app, ["classify", "train", str(tmp_path / "m"), "--train", str(train),
                              "--recipe", "linear", "--param", "min_df=1",
                              "--label-set", str(full)])
    assert res.exit_code == 0, res.stderr
    clf = Classifier.load(tmp_path / "m", labels=[*labels, "zzz"])  # accepted
    assert clf.labels_.labels == [*labels, "zzz"]
    probs = clf.predict_proba(domain_examples(10, seed=4))
    assert (probs[:, -1] < 0.01).all()  # never seen, never predicted
    src = write_records(tmp_path / "in.jsonl.gz", domain_examples(5))
    res = runner.invoke(app, ["classify", "predict", str(tmp_path / "m"), "--input", str(src),
                              "--output", str(tmp_path / "o.jsonl"), "--label-set", str(full)])
    assert res.exit_code == 0, res.stderr
    other = tmp_path / "other.txt"
    other.write_text("\n".join([*labels[:2], *(f"new{i}" for i in range(7))]))
    res = runner.invoke(app, ["classify", "predict", str(tmp_path / "m"), "--input", str(src),
                              "--output", str(tmp_path / "o.jsonl"), "--label-set", str(other)])
    assert res.exit_code == 1
    assert (f"7 of the 9 expected labels missing ['new0', 'new1', 'new2', 'new3', 'new4'] and "
            f"2 more, {len(labels) - 1} unexpected") in res.stderr
    res = runner.invoke(app, ["classify", "predict", str(tmp_path / "m"), "--input", str(src),
                              "--output", str(tmp_path / "o.jsonl"), "--label-set",
                              str(tmp_path / "missing.csv")])
    assert res.exit_code == 1 and "label set not found" in res.stderr
    assert "Errno" not in res.stderr


# -- item 5: the trainer's own bars ---------------------------------------------------------
def test_trainer_is_built_without_the_model_card_bar(tmp_path, capfd):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    from tagalign.train.progress import quiet_trainer_class

    model = SentenceTransformer(str(tiny_bert(tmp_path / "bert")), device="cpu")
    data = Dataset.from_dict({"sentence1": ["epic hero"] * 4, "sentence2": ["poem saga"] * 4,
                              "score": [1.0, 0.0, 1.0, 0.0]})
    capfd.readouterr()
    quiet_trainer_class()(model=model, train_dataset=data, loss=CoSENTLoss(model))
    captured = capfd.readouterr()
    assert "widget" not in captured.err + captured.out


def test_lexical_project_still_trains(tmp_path):
    # parameters of a created project are checked once, in the constructor
    Project.create(tmp_path / "p", tiny_vocab(), "lexical", {"max_ngram": 3}).train(
        tiny_records(20))
    with pytest.raises(ParamError, match="max_ngram=0"):
        Project.create(tmp_path / "q", tiny_vocab(), "lexical", {"max_ngram": 0})
