"""Lemma-grouped validation of ordinal pair scoring (issue 35): folds by lemma, the
bootstrap over lemmas, the cut-point modes, out-of-fold cosines and `pairs train --cv`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tagalign.errors import InputError
from tagalign.pairs.crossval import OutOfFold, _fit_rows, cut_point_predictions
from tagalign.pairs.data import Pair, Use, load_comedi
from tagalign.pairs.metrics import krippendorff_alpha
from tagalign.pairs.thresholds import Thresholds, apply_cuts, fit_cuts
from tagalign.pairs.validation import (
    bootstrap_alpha,
    lemma_folds,
    paired_difference,
    sample_per_language,
)
from test_pairs import tiny_params, tiny_st, write_comedi  # noqa: F401 - fixture


def make_pairs(spec: list[tuple[str, str, int]]) -> list[Pair]:
    """``(language, lemma, n)`` → n pairs of that lemma (labels cycling 1..4)."""
    out = []
    for language, lemma, n in spec:
        for i in range(n):
            u1 = Use(f"{language}-{lemma}-{i}a", lemma, f"a {lemma} b", 2, 2 + len(lemma))
            u2 = Use(f"{language}-{lemma}-{i}b", lemma, f"c {lemma} d", 2, 2 + len(lemma))
            out.append(Pair(u1, u2, lemma, language, float(i % 4 + 1)))
    return out


# -- folds ------------------------------------------------------------------------------
LANGS = st.sampled_from(["chinese", "german", "norwegian"])
LEMMAS = st.sampled_from(["bank", "mouse", "plane", "ball", "rock", "bat", "seal", "bow"])


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(spec=st.lists(st.tuples(LANGS, LEMMAS, st.integers(1, 6)), min_size=1, max_size=20),
       k=st.integers(2, 5), seed=st.integers(0, 3))
def test_no_lemma_is_on_both_sides_of_any_fold(spec, k, seed):
    pairs = make_pairs(spec)
    groups = {(p.language, p.lemma) for p in pairs}
    if len(groups) < k:
        with pytest.raises(InputError, match=f"{k} folds need at least {k} lemmas"):
            lemma_folds(pairs, k, seed)
        return
    folds = lemma_folds(pairs, k, seed)
    assert len(folds.fold) == len(pairs) and set(folds.fold.tolist()) <= set(range(k))
    tested = np.concatenate([folds.test_index(j) for j in range(k)])
    assert sorted(tested.tolist()) == list(range(len(pairs)))  # each pair in one test fold
    for j in range(k):
        test = {(pairs[i].language, pairs[i].lemma) for i in folds.test_index(j)}
        train = {(pairs[i].language, pairs[i].lemma) for i in folds.train_index(j)}
        assert not test & train
    per_lang: dict[str, set[str]] = {}
    for language, lemma in groups:
        per_lang.setdefault(language, set()).add(lemma)
    assert folds.thin == {x: len(v) for x, v in per_lang.items() if len(v) < k}
    assert np.array_equal(lemma_folds(pairs, k, seed).fold, folds.fold)  # seeded


def test_folds_balance_pairs_within_a_language_and_change_with_the_seed():
    pairs = make_pairs([("german", f"w{i}", 10) for i in range(40)]
                       + [("swedish", f"w{i}", 10) for i in range(2)])
    folds = lemma_folds(pairs, 4, seed=0)
    german = np.array([p.language == "german" for p in pairs])
    assert np.bincount(folds.fold[german], minlength=4).tolist() == [100, 100, 100, 100]
    # a language with two lemmas for four folds: two folds test it, each one lemma
    assert sorted(np.bincount(folds.fold[~german], minlength=4).tolist()) == [0, 0, 10, 10]
    assert folds.thin == {"swedish": 2}
    assert not np.array_equal(lemma_folds(pairs, 4, seed=1).fold, folds.fold)
    with pytest.raises(InputError, match="at least 2 folds"):
        lemma_folds(pairs, 1)


def test_sample_per_language_caps_each_language_and_stays_in_the_index():
    pairs = make_pairs([("german", "a", 30), ("swedish", "b", 5)])
    index = np.arange(10, 35)
    got = sample_per_language(pairs, index, 8, seed=0)
    assert set(got.tolist()) <= set(index.tolist())
    langs = [pairs[i].language for i in got]
    assert langs.count("german") == 8 and langs.count("swedish") == 5
    assert np.array_equal(got, sample_per_language(pairs, index, 8, seed=0))


# -- bootstrap over lemmas --------------------------------------------------------------
def test_bootstrap_resamples_lemmas_so_one_bad_word_widens_the_interval():
    """Two English lemmas of 200 pairs, one predicted perfectly, one at random: alpha is
    their pooled figure, and the interval spans what one lemma alone gives (a bootstrap of
    pairs would be a few hundredths wide). A language of one lemma has a point interval."""
    rng = np.random.default_rng(0)
    gold = rng.integers(1, 5, 600).astype(float)
    pred = gold.copy()
    pred[200:400] = rng.integers(1, 5, 200)
    langs = ["english"] * 400 + ["german"] * 200
    lemmas = ["good"] * 200 + ["noisy"] * 200 + ["haus"] * 200
    rep = bootstrap_alpha(gold, [pred], langs, lemmas, n_boot=400, seed=0)
    assert rep.alpha["english"] == pytest.approx(krippendorff_alpha(gold[:400], pred[:400]))
    assert rep.alpha["german"] == pytest.approx(1.0)
    lo, hi = rep.interval["english"]
    # a quarter of the draws take the noisy lemma twice (alpha of the doubled pairs)
    noisy_alone = krippendorff_alpha(np.tile(gold[200:400], 2), np.tile(pred[200:400], 2))
    assert noisy_alone < 0.1
    assert lo == pytest.approx(noisy_alone, abs=1e-9) and hi == pytest.approx(1.0)
    assert rep.interval["german"] == pytest.approx((1.0, 1.0))
    assert rep.mean_alpha == pytest.approx((rep.alpha["english"] + 1.0) / 2)
    assert rep.mean_interval[0] == pytest.approx((noisy_alone + 1) / 2)
    assert rep.lemmas == {"english": 2, "german": 1}
    assert rep.pairs == {"english": 400, "german": 200}
    # two prediction arrays (repeats): alpha is their mean
    rep2 = bootstrap_alpha(gold, [pred, gold], langs, lemmas, n_boot=10, seed=0)
    assert rep2.alpha["english"] == pytest.approx((rep.alpha["english"] + 1.0) / 2)



def test_paired_difference_cancels_what_both_predictions_share():
    """Two predictions of the same 30 lemmas: b mends one lemma's pairs that a got wrong,
    everything else alike. The lemmas' own difficulty is shared, so the paired interval
    lies wholly above 0 while the two separate intervals overlap; a prediction against
    itself differs by exactly 0 in every draw."""
    rng = np.random.default_rng(0)
    n_lemmas, per = 30, 20
    gold = rng.integers(1, 5, n_lemmas * per).astype(float)
    noisy = gold.copy()
    hard = rng.random(len(gold)) < np.repeat(rng.uniform(0.1, 0.9, n_lemmas), per)
    noisy[hard] = rng.integers(1, 5, hard.sum())
    mended = noisy.copy()
    mended[:per * 6] = gold[:per * 6]  # six lemmas fully right in b
    langs = ["english"] * len(gold)
    lemmas = [f"w{i // per}" for i in range(len(gold))]
    d = paired_difference(gold, [noisy], [mended], langs, lemmas, n_boot=300, seed=0)
    a = bootstrap_alpha(gold, [noisy], langs, lemmas, n_boot=300, seed=0)
    b = bootstrap_alpha(gold, [mended], langs, lemmas, n_boot=300, seed=0)
    assert d["diff"] == pytest.approx(b.mean_alpha - a.mean_alpha)
    assert d["diff"] > 0.05 and d["lo"] > 0 and d["share_b_ahead"] == 1.0
    assert b.mean_interval[0] < a.mean_interval[1]  # separately, the intervals overlap
    same = paired_difference(gold, [noisy], [noisy], langs, lemmas, n_boot=50, seed=0)
    assert same == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "share_b_ahead": 0.0}

# -- cut-point modes --------------------------------------------------------------------
def offset_languages(seed: int = 0, n: int = 400):
    """Two languages with the same gold and noise, Swedish cosines shifted up by 0.3 (a
    model whose cosine level differs by language)."""
    rng = np.random.default_rng(seed)
    gold = rng.integers(1, 5, n).astype(float)
    base = gold / 5 + rng.normal(0, 0.03, n)
    scores = np.concatenate([base, base + 0.3])
    langs = np.array(["english"] * n + ["swedish"] * n)
    lemmas = np.array([f"e{i % 40}" for i in range(n)] + [f"s{i % 2}" for i in range(n)])
    return scores, np.concatenate([gold, gold]), langs, lemmas


def test_pooled_mode_keeps_one_set_of_cut_points_for_every_language():
    scores, gold, langs, lemmas = offset_languages()
    th = Thresholds(mode="pooled").fit(scores, gold, langs, lemmas)
    assert set(th.cuts_) == {"*"}
    assert np.array_equal(th.predict(scores, langs), apply_cuts(scores, th.cuts_["*"]))
    # the shift defeats one set of cut points; per-language cut points absorb it
    per_lang = Thresholds(mode="language").fit(scores, gold, langs, lemmas)
    a_pooled = krippendorff_alpha(gold, th.predict(scores, langs))
    a_lang = krippendorff_alpha(gold, per_lang.predict(scores, langs))
    assert a_lang > 0.99 and a_pooled < 0.9


def test_normalised_mode_standardises_each_language_and_cuts_once():
    scores, gold, langs, lemmas = offset_languages()
    th = Thresholds(mode="normalised").fit(scores, gold, langs, lemmas)
    eng, swe = langs == "english", langs == "swedish"
    assert th.stats_["english"] == pytest.approx([scores[eng].mean(), scores[eng].std()])
    assert th.stats_["swedish"][0] - th.stats_["english"][0] == pytest.approx(0.3)
    pred = th.predict(scores, langs)
    assert np.array_equal(pred[eng], pred[swe])  # the same cosines up to the shift
    assert krippendorff_alpha(gold, pred) > 0.95
    # a language never seen uses the pooled statistics
    z = (0.5 - th.stats_["*"][0]) / th.stats_["*"][1]
    assert th.predict([0.5], ["danish"])[0] == apply_cuts([z], th.cuts_["*"])[0]


@pytest.mark.parametrize("shrink", [0.0, 2.0, 8.0, 1e9])
def test_shrunk_mode_weighs_own_and_pooled_cut_points_by_lemma_count(shrink):
    scores, gold, langs, lemmas = offset_languages()
    th = Thresholds(mode="shrunk", shrink=shrink).fit(scores, gold, langs, lemmas)
    pooled = fit_cuts(scores, gold)
    for language, n_lemmas in (("english", 40), ("swedish", 2)):
        m = langs == language
        own = fit_cuts(scores[m], gold[m])
        w = n_lemmas / (n_lemmas + shrink)
        assert th.cuts_[language] == pytest.approx(np.sort(w * own + (1 - w) * pooled))
    if shrink == 0:
        lang = Thresholds(mode="language").fit(scores, gold, langs)
        assert set(th.cuts_) == set(lang.cuts_)
        for key, cuts in lang.cuts_.items():
            assert th.cuts_[key] == pytest.approx(cuts)
    with pytest.raises(InputError, match="lemma"):
        Thresholds(mode="shrunk").fit(scores, gold, langs)


@pytest.mark.parametrize("mode", ["language", "pooled", "shrunk", "normalised"])
def test_each_mode_round_trips_and_an_old_file_loads_as_per_language(tmp_path, mode):
    scores, gold, langs, lemmas = offset_languages(n=120)
    th = Thresholds(mode=mode, shrink=4.0).fit(scores, gold, langs, lemmas)
    th.save(tmp_path / "t.json")
    back = Thresholds.load(tmp_path / "t.json")
    assert back.mode == mode and back.cuts_ == th.cuts_ and back.stats_ == th.stats_
    assert np.array_equal(back.predict(scores, langs), th.predict(scores, langs))
    old = {"labels": [1, 2, 3, 4], "pooled_key": "*", "cuts": {"*": [0.1, 0.2, 0.3],
                                                               "english": [0.2, 0.3, 0.4]}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    loaded = Thresholds.load(tmp_path / "old.json")
    assert loaded.mode == "language" and loaded.predict([0.25], ["english"])[0] == 2
    with pytest.raises(InputError, match="cut-point mode"):
        Thresholds(mode="median")


# -- out-of-fold cut points -------------------------------------------------------------
def synthetic_oof(seed: int = 0) -> OutOfFold:
    rng = np.random.default_rng(seed)
    n = 480
    gold = rng.integers(1, 5, n).astype(float)
    fold = np.repeat(np.arange(4), n // 4)
    lang = np.array(["english", "german"] * (n // 2))
    lemma = np.array([f"{lang[i]}-{fold[i]}-{i % 6}" for i in range(n)])
    return OutOfFold([str(i) for i in range(n)], fold, lang, lemma, gold,
                     gold / 5 + rng.normal(0, 0.05, n), [1.0] * 4, [0.5] * 4)


def test_cut_points_of_a_fold_never_see_its_own_cosines():
    """Fold 0's cosines moved far above everything: cut points fitted on the other folds
    put all of fold 0 in the top class (fitted on fold 0 they would spread it)."""
    oof = synthetic_oof()
    moved = oof.cosine.copy()
    moved[oof.fold == 0] += 10
    for mode in ("language", "pooled", "shrunk", "normalised"):
        pred = cut_point_predictions(oof.with_cosine(moved), mode)[0]
        assert set(pred[oof.fold == 0].tolist()) == {4}
        unmoved = cut_point_predictions(oof, mode)[0]
        assert set(unmoved[oof.fold == 0].tolist()) == {1, 2, 3, 4}


def test_dev_sized_fit_sets_draw_that_many_lemmas_from_the_other_folds():
    oof = synthetic_oof()
    rng = np.random.default_rng(0)
    rows = _fit_rows(oof, 1, {"english": 3, "german": 50}, rng)
    assert not (oof.fold[rows] == 1).any()
    eng = rows[oof.language[rows] == "english"]
    assert len(set(oof.lemma[eng].tolist())) == 3
    ger = rows[oof.language[rows] == "german"]
    assert len(ger) == ((oof.fold != 1) & (oof.language == "german")).sum()  # all it has
    preds = cut_point_predictions(oof, "language", fit_lemmas={"english": 3, "german": 3},
                                  repeats=3, seed=0)
    assert len(preds) == 3 and not all(np.array_equal(preds[0], p) for p in preds[1:])


# -- with a tiny model ------------------------------------------------------------------
def test_out_of_fold_trains_each_fold_and_resumes_from_its_cache(tiny_st, tmp_path,  # noqa: F811
                                                                 monkeypatch):
    from tagalign.pairs import crossval

    for lang, seed in (("english", 0), ("german", 1)):
        write_comedi(tmp_path / "data" / lang, n_uses=6, seed=seed)
    pairs = load_comedi(tmp_path / "data")
    folds = lemma_folds(pairs, 2, seed=0)
    params = tiny_params(tiny_st, limit_pairs=20)
    trained: list[int] = []
    from tagalign.pairs import training

    original = training.fit_model

    def spy(scorer, train_pairs, dev, *a, **kw):
        trained.append(len(train_pairs))
        held = {(p.language, p.lemma) for p in train_pairs}
        assert not held & {(pairs[i].language, pairs[i].lemma)
                           for i in folds.test_index(len(trained) - 1)}
        assert dev == []  # held-out lemmas never pick the checkpoint
        return original(scorer, train_pairs, dev, *a, **kw)

    monkeypatch.setattr(training, "fit_model", spy)
    oof = crossval.out_of_fold(params, pairs, folds, 5, tmp_path / "w", tmp_path / "cache")
    assert trained == [20, 20]
    assert len(oof.gold) == 2 * 2 * 5  # 5 per language and fold (each has 12)
    assert set(oof.fold.tolist()) == {0, 1}
    assert np.all(np.abs(oof.cosine) <= 1 + 1e-6)
    for k in (0, 1):
        test_keys = {crossval.pair_key(pairs[i]) for i in folds.test_index(k)}
        assert {key for key, f in zip(oof.keys, oof.fold, strict=True) if f == k} <= test_keys
    again = crossval.out_of_fold(params, pairs, folds, 5, tmp_path / "w", tmp_path / "cache")
    assert trained == [20, 20]  # both folds came from the cache
    assert np.array_equal(again.cosine, oof.cosine) and again.keys == oof.keys


def test_cli_train_cv_prints_and_keeps_the_lemma_cv_alpha(tiny_st, tmp_path):  # noqa: F811
    from typer.testing import CliRunner

    from tagalign.cli import app, pairs_cmd  # noqa: F401 - registers `tagalign pairs`
    from tagalign.pairs.model import PairScorer

    for lang, seed in (("english", 0), ("german", 1)):
        write_comedi(tmp_path / "train" / lang, n_uses=6, seed=seed)
        write_comedi(tmp_path / "dev" / lang, n_uses=6, seed=seed + 10)
    args = ["pairs", "train", str(tmp_path / "model"), "--train", str(tmp_path / "train"),
            "--dev", str(tmp_path / "dev"), "--base-model", f"st:{tiny_st}", "--loss",
            "cosent", "--param", "epochs=1", "--param", "max_seq_length=32", "--param",
            "lr=0.001", "--param", "batch_size=8", "--param", "cut_mode=pooled",
            "--device", "cpu"]
    out = CliRunner().invoke(app, [*args, "--cv", "2", "--cv-pairs", "6"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    cv, dev = config["validation"]["lemma_cv"], config["validation"]["dev"]
    assert cv["folds"] == 2 and cv["cut_mode"] == "pooled"
    assert set(cv["alpha"]) == {"english", "german"}
    assert cv["pairs"] == {"english": 12, "german": 12}  # 6 per language and fold
    assert f"lemma-CV alpha {cv['mean_alpha']:.4f}" in text
    assert f"dev alpha {dev['mean_alpha']:.4f}" in text
    lo, hi = cv["mean_interval"]
    assert lo <= cv["mean_alpha"] + 1e-9 and cv["mean_alpha"] <= hi + 1e-9
    assert json.loads((tmp_path / "model" / "thresholds.json").read_text())["mode"] == "pooled"
    # a model folder saved before issue 35 (no validation, no cut-point mode) still loads
    del config["validation"]
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    th = json.loads((tmp_path / "model" / "thresholds.json").read_text())
    del th["mode"]
    (tmp_path / "model" / "thresholds.json").write_text(json.dumps(th))
    loaded = PairScorer.load(tmp_path / "model", device="cpu")
    assert loaded.validation == {} and loaded.thresholds.mode == "language"
    bad = CliRunner().invoke(app, [*args, "--cv", "1"])
    assert bad.exit_code == 2 and "at least 2 folds" in bad.output


def test_cut_mode_parameters_are_checked_before_any_model_loads():
    from tagalign.pairs.params import check_params

    check_params({"cut_mode": "shrunk", "cut_shrink": 4})
    with pytest.raises(InputError, match="cut_mode must be one of"):
        check_params({"cut_mode": "median"})
    with pytest.raises(InputError, match="cut_shrink must be a number >= 0"):
        check_params({"cut_shrink": -1})
