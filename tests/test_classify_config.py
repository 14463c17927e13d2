"""The classify recipes' typed configs (`tagalign.classify.config`): each recipe's defaults,
ranges and saved parameters are its config's, in the order models saved before the configs
existed list them, and its code reads the config."""

from __future__ import annotations

import json

import pytest

from tagalign.classify import Classifier, get_classifier
from tagalign.classify.config import (
    LabelContrastiveConfig,
    LinearConfig,
    LinearNgramsConfig,
    SubjectStackConfig,
)
from tagalign.errors import InputError
from tagalign.params import ParamError
from test_classify import domain_examples

#: each recipe's parameters as the tagalign before the typed configs saved them
SAVED = {
    "linear": {"C": 4.0, "min_df": 2, "max_df": 0.5, "max_iter": 1000, "limit_train": None,
               "seed": 0},
    "linear-ngrams": {"C": 4.0, "min_df": 2, "max_df": 0.5, "max_iter": 1000,
                      "word_ngrams": 2, "char_chars": 200, "char_ngrams": [2, 5],
                      "class_weight": None, "limit_train": None, "seed": 0},
    "label-contrastive": {
        "base_model": "e5-small", "max_seq_length": 256, "batch_size": 26, "lr_head": 1e-3,
        "lr_body": 2e-5, "alpha": 0.01, "temperature": 1.0, "hidden": 256, "dropout": 0.5,
        "epochs_head": 10, "epochs_contrastive": 50, "epochs_post": 10, "contrastive": True,
        "contrast_sampler": False, "per_language": True, "languages": None,
        "min_language_records": 1, "train_layers": None, "limit_train": None,
        "encode_batch_size": 64, "seed": 0},
    "subjects-stack": {
        "text_recipe": "linear-ngrams", "text_params": {}, "top_k": 20, "neighbours": True,
        "neighbour_k": 30, "neighbour_power": 2.0, "stacker": "lightgbm", "rounds": 300,
        "learning_rate": 0.05, "leaves": 15, "C": 1.0, "bag": 5, "folds": 5,
        "held_out": True, "seed": 0},
}
CONFIGS = {"linear": LinearConfig, "linear-ngrams": LinearNgramsConfig,
           "label-contrastive": LabelContrastiveConfig, "subjects-stack": SubjectStackConfig}


@pytest.mark.parametrize("name", sorted(SAVED))
def test_a_classifiers_defaults_are_its_configs_in_the_saved_order(name):
    clf = get_classifier(name)
    assert type(clf).config_class is CONFIGS[name]
    assert list(type(clf).defaults.items()) == list(SAVED[name].items())
    assert CONFIGS[name]().values() == SAVED[name]
    assert clf.config == CONFIGS[name]()
    assert list(clf.get_params().items()) == list(SAVED[name].items())


def test_the_classifiers_read_their_configs():
    assert get_classifier("linear", C=2.0, seed=4).config == LinearConfig(C=2.0, seed=4)
    ngrams = get_classifier("linear-ngrams", char_chars=0, threads=3)  # threads: retired
    assert ngrams.config.char_chars == 0 and "threads" not in ngrams.get_params()
    stack = get_classifier("subjects-stack", top_k=7, held_out=False)
    assert (stack.config.top_k, stack.config.held_out) == (7, False)
    assert stack.set_params(top_k=9).config.top_k == 9
    mcpt = get_classifier("label-contrastive", languages=["de"], train_layers=2)
    assert (mcpt.config.languages, mcpt.config.train_layers) == (["de"], 2)


@pytest.mark.parametrize(("name", "params", "message"), [
    ("linear-ngrams", {"word_ngrams": 3}, "word_ngrams must be 1 or 2"),
    ("linear-ngrams", {"char_ngrams": [5, 2]}, r"char_ngrams must be \[min, max\]"),
    ("linear-ngrams", {"char_chars": -1}, "char_chars must be >= 0"),
    ("linear-ngrams", {"class_weight": "x"}, "class_weight must be null or 'balanced'"),
    ("subjects-stack", {"stacker": "x"}, "stacker must be one of"),
    ("subjects-stack", {"folds": 1}, "folds must be at least 2"),
    ("subjects-stack", {"text_recipe": "subjects-stack"}, "text_recipe must be a text"),
])
def test_a_configs_own_checks_refuse_before_anything_loads(name, params, message):
    cls = type(get_classifier(name))
    with pytest.raises(InputError, match=f"recipe '{name}': {message}"):
        cls.check_params(params)
    with pytest.raises(InputError, match=message):
        get_classifier(name, **params)


def test_a_range_on_a_field_is_the_recipes():
    with pytest.raises(ParamError, match="recipe 'label-contrastive': parameter dropout=1.0: "
                                         "must be < 1"):
        get_classifier("label-contrastive", dropout=1.0)
    with pytest.raises(ParamError, match="parameter limit_train=0: must be >= 1"):
        get_classifier("linear-ngrams", limit_train=0)


@pytest.mark.parametrize("name", ["linear", "linear-ngrams"])
def test_a_saved_models_manifest_params_are_unchanged_and_load(name, tmp_path):
    clf = get_classifier(name, min_df=1)
    clf.fit(domain_examples(60), domain_examples(20, 2))
    clf.save(tmp_path / "m")
    text = (tmp_path / "m" / "config.json").read_text()
    saved = json.loads(text)["params"]
    assert list(saved.items()) == list({**SAVED[name], "min_df": 1}.items())
    # an older manifest, with its retired ``threads``, loads to the same model
    meta = json.loads(text)
    meta["params"] = {**meta["params"], "threads": 2} if name == "linear-ngrams" \
        else meta["params"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(meta))
    loaded = Classifier.load(tmp_path / "m")
    assert loaded.config == clf.config
    probe = domain_examples(10, 5)
    assert (loaded.predict_proba(probe) == clf.predict_proba(probe)).all()
