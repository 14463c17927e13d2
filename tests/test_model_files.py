"""One base for the three model families (issue 45, point 8): recipes, classifiers and pair
scorers declare their ranges beside their defaults, check parameters the same way and write
the same manifest; folders saved by the tagalign before (their manifests rebuilt here key
for key as it wrote them) still load. The pair scorer's folders: tests/test_pairs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagalign.classify import CLASSIFIERS, Classifier, get_classifier
from tagalign.errors import InputError, ModelFormatError
from tagalign.model_files import ModelFamily
from tagalign.pairs.params import PairScorerBase
from tagalign.params import ParamError
from tagalign.project import Project, Tagger
from tagalign.project.config import MODEL_MANIFEST
from tagalign.recipes import get_recipe, recipe_names
from tagalign.recipes.base import Recipe
from tagalign.suggest import SuggestRequest
from test_classify import domain_examples
from tiny_models import tiny_records, tiny_vocab


def families() -> list[type[ModelFamily]]:
    return [*(get_recipe(n) for n in recipe_names()), *CLASSIFIERS.values(), PairScorerBase]


def test_every_model_class_is_a_family_member_with_ranges_beside_its_defaults():
    for cls in families():
        assert issubclass(cls, ModelFamily)
        assert set(cls.ranges) <= set(cls.defaults), cls  # a range without a default
        cls.check_params(dict(cls.defaults))
    import tagalign.params

    assert not hasattr(tagalign.params, "RANGES")  # no global table keyed by name


@pytest.mark.parametrize("cls, bad, message", [
    (get_recipe("lexical"), {"max_ngram": 0}, "recipe 'lexical': parameter max_ngram=0: "
                                              "must be >= 1"),
    (CLASSIFIERS.lookup("linear"), {"max_df": 1.5}, "parameter max_df=1.5: must be <= 1"),
    (CLASSIFIERS.lookup("linear"), {"limit_train": None}, None),  # None stays allowed
    (PairScorerBase, {"epochs": -1}, "pairs: parameter epochs=-1: must be >= 0"),
    (PairScorerBase, {"limit_pairs": 0}, "pairs: parameter limit_pairs=0: must be >= 1")])
def test_each_family_checks_its_own_ranges(cls, bad, message):
    if message is None:
        cls.check_params(bad)
        return
    with pytest.raises(ParamError, match=message):
        cls.check_params(bad)


def test_unknown_names_keep_each_familys_wording():
    for cls, wording in ((get_recipe("lexical"), "recipe 'lexical' has no parameter(s) ['x']"),
                         (CLASSIFIERS.lookup("linear"),
                          "recipe 'linear': unknown parameter(s) ['x']"),
                         (PairScorerBase, "unknown parameter(s) x; known: base_model")):
        with pytest.raises(InputError) as err:
            cls.check_params({"x": 1})
        assert wording in str(err.value)


def _rewrite(path: Path, keys: list[str], drop: tuple[str, ...] = ()) -> dict:
    """The manifest at ``path`` with its keys in the order the old writer put them."""
    meta = json.loads(path.read_text())
    assert set(meta) == set(keys), sorted(meta)  # the same keys as before: nothing lost
    old = {k: meta[k] for k in keys if k not in drop}
    path.write_text(json.dumps(old))
    return old


def test_a_recipe_saved_by_the_old_writer_loads_and_ranks_the_same(tmp_path):
    project = Project.create(tmp_path / "p", tiny_vocab(), "lexical", {"max_ngram": 3})
    project.train(tiny_records(20))
    records = tiny_records(6, seed=5)
    request = SuggestRequest(limit=5)
    before = [[(s.id, s.score) for s in t.suggestions] for t in
              Tagger(Project.load(tmp_path / "p")).tag(records, request)]
    manifest = tmp_path / "p" / "model" / "recipe.json"
    meta = json.loads(manifest.read_text())
    assert list(meta)[:3] == ["format", "recipe", "params"] and list(meta)[-1] == "versions"
    assert meta["format"] == Recipe.model_format == 2
    old_keys = ["format", "recipe", "params", "vocabulary", "versions", "saved", "id"]
    for drop in ((), ("format",)):  # format 2, and format 1 (saved before the key)
        _rewrite(manifest, old_keys, drop)
        again = Tagger(Project.load(tmp_path / "p")).tag(records, request)
        assert [[(s.id, s.score) for s in t.suggestions] for t in again] == before
        meta = {**json.loads(manifest.read_text()), "format": 2}
        manifest.write_text(json.dumps(meta))
    meta["format"] = 3
    manifest.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match=r"^model .* in model format 3; .* reads formats "
                                               r"1, 2: retrain the project \(tagalign train\)"):
        Project.load(tmp_path / "p")


def test_a_project_with_its_params_in_both_files_loads_with_the_models(tmp_path):
    """The layout before the model's manifest held the one copy: project.json kept the
    parameters asked for (and, after ``hyperopt --save``, the tuned values and their
    names) beside the model's manifest. Such a folder loads; the model's copy wins, and the
    config's vanishes at its next write."""
    assert Recipe.manifest_name == MODEL_MANIFEST  # spelled twice: config.py imports no recipe
    path = tmp_path / "p"
    project = Project.create(path, tiny_vocab(), "lexical", {"max_ngram": 3})
    assert Project.read_config(path).params == {"max_ngram": 3}  # untrained: asked for
    project.train(tiny_records(20))
    config = json.loads((path / "project.json").read_text())
    assert "params" not in config  # trained: the model's manifest holds them
    manifest = json.loads((path / "model" / "recipe.json").read_text())
    assert manifest["params"]["max_ngram"] == 3
    records, request = tiny_records(6, seed=5), SuggestRequest(limit=5)
    before = [[(s.id, s.score) for s in t.suggestions] for t in
              Tagger(Project.load(path)).tag(records, request)]
    # the old writer's project.json, key for key; its params disagree with the model's here
    # to show which copy wins (the old writer kept them equal)
    old = {"format": "tagalign-project", "name": "p", "recipe": "lexical",
           "params": {"max_ngram": 2}, "vocabulary": config["vocabulary"],
           "created": config["created"], "trained_at": config["trained_at"],
           "versions": config["versions"], "tuned_params": ["max_ngram"]}
    (path / "project.json").write_text(json.dumps(old))
    loaded = Project.load(path)
    assert loaded.params["max_ngram"] == 3 and loaded.recipe.params["max_ngram"] == 3
    assert loaded.config.params is None
    assert [[(s.id, s.score) for s in t.suggestions] for t in
            Tagger(loaded).tag(records, request)] == before
    assert Project.read_params(path)["max_ngram"] == 3
    # a rerun of `tagalign train` with what the model was trained with continues it
    again = Project.create(path, tiny_vocab(), "lexical", {"max_ngram": 3})
    assert again.params["max_ngram"] == 3 and again.config.params is None
    loaded.set_scores({"f1@5": 0.5})  # the next write leaves the one copy
    config = json.loads((path / "project.json").read_text())
    assert "params" not in config and config["tuned_params"] == ["max_ngram"]
    assert Project.load(path).params == manifest["params"]


def test_a_classifier_saved_by_the_old_writer_loads_and_predicts_the_same(tmp_path):
    clf = get_classifier("linear", min_df=1).fit(domain_examples(60), domain_examples(20, 2))
    clf.save(tmp_path / "m")
    examples = domain_examples(8, seed=4)
    manifest = tmp_path / "m" / "config.json"
    meta = _rewrite(manifest, ["format", "recipe", "params", "labels", "thresholds",
                               "history", "versions"])
    assert meta["format"] == 1
    loaded = Classifier.load(tmp_path / "m")
    assert type(loaded) is type(clf)
    assert loaded.predict(examples) == clf.predict(examples)
    assert type(loaded).load(tmp_path / "m").params == clf.params  # on the recipe's class
    with pytest.raises(InputError, match="a 'linear' classifier, not 'subjects-stack'"):
        CLASSIFIERS.lookup("subjects-stack").load(tmp_path / "m")
    manifest.write_text(json.dumps({**meta, "format": 2}))
    with pytest.raises(ModelFormatError, match=r"^classifier .* in model format 2; .* reads "
                                               r"formats 1: retrain the classifier"):
        Classifier.load(tmp_path / "m")
    manifest.write_text(json.dumps({k: v for k, v in meta.items() if k != "format"}))
    with pytest.raises(ModelFormatError, match="model format None"):  # never written so
        Classifier.load(tmp_path / "m")


def test_overwrite_asks_for_new_params_until_the_new_model_is_written(tmp_path):
    """``train --overwrite`` of a trained folder: project.json holds the new parameters
    while the old model still answers; a rerun (training interrupted) continues with them,
    and the new model's manifest takes them over."""
    path = tmp_path / "p"
    Project.create(path, tiny_vocab(), "lexical", {"max_ngram": 3}).train(tiny_records(20))
    Project.create(path, tiny_vocab(), "lexical", {"max_ngram": 2}, overwrite=True)
    loaded = Project.load(path)  # the old model, the new request
    assert loaded.recipe.params["max_ngram"] == 3 and loaded.params == {"max_ngram": 2}
    again = Project.create(path, tiny_vocab(), "lexical", {"max_ngram": 2})
    assert again.new_recipe().params["max_ngram"] == 2
    again.train(tiny_records(20))
    assert Project.read_config(path).params is None
    assert "params" not in json.loads((path / "project.json").read_text())
    assert Project.load(path).params["max_ngram"] == 2 == Project.read_params(path)["max_ngram"]


def test_each_source_is_built_from_its_part_of_the_hybrid_config():
    """Sources take one frozen config (fields, defaults, ranges beside them), a part of the
    hybrid's `HybridConfig`; its flat parameters become the parts' fields in one place
    (`HybridConfig.from_params`), and a source's ``top_k`` is its candidate count."""
    from dataclasses import FrozenInstanceError, replace

    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import SOURCE_PARTS, HybridConfig
    from tagalign.suggest.sources import SOURCES, SourceConfig
    from tagalign.suggest.sources.neighbours import TfidfNeighboursConfig

    config = HybridConfig.from_params({"knn_k": 7, "candidates_tfidf_knn": 12})
    src = config.new_source("tfidf_knn")
    assert src.config == TfidfNeighboursConfig(k=7, power=2.0, top_k=12, prune_df=0.05,
                                               rescore=300)
    assert config.emb_knn.k == 7 and config.new_source("emb_knn").config.top_k == 30
    with pytest.raises(FrozenInstanceError):
        src.config.k = 3  # type: ignore[misc]
    recipe_config = HybridConfig.from_params(HybridRecipe.defaults)
    assert recipe_config == HybridConfig()
    for name in [*HybridRecipe.defaults["sources"], "domains"]:
        cls = SOURCES.lookup(name)
        made = recipe_config.source_config(name, cls.config_class)
        assert isinstance(made, cls.config_class) and isinstance(made, SourceConfig)
        part = getattr(recipe_config, SOURCE_PARTS[name])
        assert made == replace(part, **({"top_k": 30} if "top_k" in part.field_names()
                                        else {})), name
        # a source built directly has the recipe's settings (all but its candidate count)
        direct = cls().config
        top_k = {"top_k": direct.top_k} if "top_k" in direct.field_names() else {}
        assert replace(made, **top_k) == direct, name
    with pytest.raises(ParamError, match="parameter k=0: must be >= 1"):
        TfidfNeighboursConfig(k=0)
    with pytest.raises(ParamError, match="parameter knn_k=0: must be >= 1"):
        HybridRecipe.check_params({"knn_k": 0})


def test_the_hybrid_defaults_ranges_and_names_are_derived_from_its_config():
    """Each default is written once, on its part's field: the recipe's published
    ``defaults`` and ``ranges`` are read off `HybridConfig` under the saved flat names,
    which round-trip (the same names, the same order, as manifests list them); the six
    parts that once had defaults of their own now have the recipe's."""
    from tagalign.encode.static import StaticEncoderConfig
    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import FLAT_NAMES, HybridConfig
    from tagalign.suggest.fusion import RankerConfig
    from tagalign.suggest.quality import QualityConfig
    from tagalign.suggest.sources.domain_config import DomainSourceConfig
    from tagalign.suggest.sources.lexical import LabelMatcherConfig
    from tagalign.suggest.sources.neighbours import TfidfNeighboursConfig
    from tagalign.suggest.sources.omikuji import OmikujiConfig

    assert list(HybridRecipe.defaults) == list(FLAT_NAMES) and len(FLAT_NAMES) == 59
    assert HybridRecipe.defaults == HybridConfig().to_params()
    assert (RankerConfig().num_rounds, OmikujiConfig().n_trees, OmikujiConfig().max_records,
            TfidfNeighboursConfig().prune_df, LabelMatcherConfig().cross_language,
            DomainSourceConfig().seed) == (500, 1, 100_000, 0.05, True, 13)
    assert (HybridRecipe.defaults["ranker_rounds"], HybridRecipe.defaults["seed"],
            HybridRecipe.defaults["knn_prune_df"]) == (500, 13, 0.05)
    assert StaticEncoderConfig().seed == QualityConfig().seed == 13
    config = HybridConfig()
    for flat, paths in FLAT_NAMES.items():
        for path in paths:
            part, _, name = path.rpartition(".")
            owner = getattr(config, part) if part else config
            default = getattr(type(owner)(), name)
            assert (list(default) if flat == "sources" else default) \
                == HybridRecipe.defaults[flat], path
        part, _, name = paths[0].rpartition(".")
        owner_cls = type(getattr(config, part)) if part else HybridConfig
        if name in owner_cls.ranges():  # declared once, beside the field
            assert HybridRecipe.ranges[flat] is owner_cls.ranges()[name], flat
    assert HybridRecipe.ranges["refit_full"] is HybridConfig.ranges()["refit_full"]
    given = {"seed": 5, "knn_k": 9, "sources": ["omikuji"], "candidates_labels": 12,
             "domain_labels": ["a", "b"], "refit_full": False}
    back = HybridConfig.from_params(given)
    assert (back.seed, back.omikuji.seed, back.encoder.seed, back.lexical.seed,
            back.domain_source.seed, back.estimator.seed) == (5,) * 6
    assert back.to_params() == {**HybridRecipe.defaults, **given}
    assert list(back.to_params()) == list(FLAT_NAMES)
    with pytest.raises(ParamError, match="seed is saved once for"):
        HybridConfig(seed=5)  # the parts' seeds are 13: not one value of one name
    with pytest.raises(ParamError, match="parameter refit_full='x'"):
        HybridConfig.from_params({"refit_full": "x"})


def hybrid_part_configs() -> list:
    """The config classes of the hybrid's parts other than its sources."""
    from tagalign.encode.static import StaticEncoderConfig
    from tagalign.suggest.fusion import RankerConfig
    from tagalign.suggest.quality import QualityConfig

    return [RankerConfig, QualityConfig, StaticEncoderConfig]


@pytest.mark.parametrize("config_class", hybrid_part_configs(), ids=lambda c: c.__name__)
def test_each_hybrid_part_is_a_typed_part_of_the_hybrid_config(config_class):
    """The fusion ranker, quality estimate and encoder trainer take one frozen config, as
    the sources do: a part of `HybridConfig`, its ranges declared beside its fields and
    checked by the hybrid under the saved names; a bad value is refused naming them."""
    from dataclasses import FrozenInstanceError

    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import FLAT_NAMES, HybridConfig

    config = HybridConfig()
    part = next(name for name in ("ranker", "estimator", "encoder")
                if isinstance(getattr(config, name), config_class))
    assert getattr(config, part) == config_class()
    with pytest.raises(FrozenInstanceError):
        setattr(getattr(config, part), config_class.field_names()[0], 1)
    flat = {key: path.split(".")[1] for key, paths in FLAT_NAMES.items() for path in paths
            if path.startswith(f"{part}.")}
    ranged = [key for key, name in flat.items() if name in config_class.ranges()]
    assert ranged
    for key in ranged:
        bad = {**HybridRecipe.defaults, key: -1}
        with pytest.raises(ParamError, match=f"parameter {key}=-1: must be"):
            HybridConfig.from_params(bad)
        with pytest.raises(ParamError, match=f"parameter {key}=-1: must be"):
            HybridRecipe.check_params({key: -1})


def test_the_hybrid_trainer_builds_its_parts_from_the_typed_config():
    from tagalign.encode.static import StaticEncoderConfig
    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.fusion import FusionRanker, RankerConfig
    from tagalign.suggest.quality import QualityConfig, QualityEstimator

    recipe = HybridRecipe(tiny_vocab(), ranker_rounds=7, seed=5, quality_folds=4)
    trainer = recipe.trainer()
    assert trainer.config is recipe.config
    assert trainer.config.ranker == RankerConfig(num_rounds=7)
    assert trainer.config.estimator == QualityConfig(seed=5, folds=4)
    assert trainer.config.encoder == StaticEncoderConfig(seed=5)
    assert QualityEstimator(trainer.config.estimator).config.seed == 5
    with pytest.raises(ParamError, match="parameter seed=-2: must be >= 0"):
        QualityEstimator(seed=-2)
    assert FusionRanker(trainer.config.ranker, num_threads=1).config.num_rounds == 7
    assert FusionRanker(num_rounds=9).config == RankerConfig(num_rounds=9)
    with pytest.raises(ParamError, match="parameter num_rounds=0: must be >= 1"):
        FusionRanker(num_rounds=0)
