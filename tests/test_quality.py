"""Per-record quality estimates (issue 20): the tiny hybrid's estimate in `Tagger.tag`, the
CLI output, `--release-above`, the tagalign REST API; old models without an estimator;
`tagalign eval --quality` on hand-made predictions with known values.

Model: a hybrid (Omikuji, TF-IDF neighbours, lexical; 40 ranker rounds) on 800 noisy tiny
records — each names only some of its gold topics in its text, so recall varies by record.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from serving import LiveServer
from suggesting import tag
from tagalign.cli import app
from tagalign.errors import ModelFormatError
from tagalign.evaluate.quality import quality_report
from tagalign.feedback import FeedbackStore
from tagalign.io import read_json, write_json_atomic
from tagalign.predictions import review_path
from tagalign.project import Project
from tagalign.recipes.saved import MODEL_FORMAT
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.quality import QualityEstimator
from tiny_models import TOPICS, tiny_records, tiny_vocab

runner = CliRunner()
TINY_HYBRID = {"sources": ["omikuji", "tfidf_knn", "lexical"], "ranker_rounds": 40,
               "holdout_fraction": 0.25, "threads": 1}


def noisy_records(n: int, seed: int) -> list[Record]:
    """2–4 gold topics; each shows in the text with probability 0.6, plus noise words."""
    rnd = random.Random(seed)
    ids = list(TOPICS)
    out = []
    for i in range(n):
        gold = rnd.sample(ids, rnd.randint(2, 4))
        shown = [g for g in gold if rnd.random() < 0.6] or gold[:1]
        words = [rnd.choice(TOPICS[g][1].split()) for g in shown for _ in range(4)]
        words += [rnd.choice(TOPICS[rnd.choice(ids)][1].split()) for _ in range(3)]
        rnd.shuffle(words)
        out.append(Record(id=f"q{seed}-{i}", title=" ".join(words[:3]),
                          abstract=" ".join(words[3:]), language=rnd.choice(["de", "en"]),
                          subjects=gold))
    return out


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quality")
    Project.create(root / "hybrid", tiny_vocab(), "hybrid", TINY_HYBRID).train(
        noisy_records(800, seed=1))
    Project.create(root / "lexical", tiny_vocab(), "lexical").train(tiny_records(10))
    return root


def test_hybrid_estimates_in_unit_range_and_track_true_recall(projects):
    """Every record with text gets a quality in [0, 1]; an empty record none; on unseen
    records the estimated recall follows the true recall of the returned list."""
    project = Project.load(projects / "hybrid")
    dev = noisy_records(300, seed=2)
    tagged = tag(project, [*dev, Record(id="empty", title="")], limit=3)
    assert tagged[-1].quality is None and tagged[-1].suggestions == []
    q = np.array([[t.quality.recall, t.quality.precision] for t in tagged[:-1]])
    assert ((q >= 0) & (q <= 1)).all() and q[:, 0].std() > 0.05
    truth = [len(set(r.subjects) & {s.id for s in t.suggestions}) / len(r.subjects)
             for r, t in zip(dev, tagged[:-1], strict=True)]
    order = np.argsort(-q[:, 0], kind="stable")
    truth = np.array(truth)
    gap = truth[order[:150]].mean() - truth[order[150:]].mean()
    calibration = abs(q[:, 0].mean() - truth.mean())
    print(f"gap {gap:.3f} calibration {calibration:.3f} "
          f"rho {stats.spearmanr(q[:, 0], truth)[0]:.3f}")
    # the best-estimated half is truly better (measured ~0.1-0.15; an estimator trained on
    # shuffled targets: ~0), and the mean estimate is the mean true recall (measured ~0.02)
    assert gap > 0.05 and calibration < 0.06, (gap, calibration)
    # a higher threshold cuts the list: the estimate follows what is returned
    cut = tag(project, dev[:20], limit=3, threshold=0.5)
    assert all(all(s.score >= 0.5 for s in t.suggestions) for t in cut)


def test_saved_estimator_reloads_identically_and_model_formats(projects, tmp_path):
    """The estimator is saved as LightGBM text + JSON (no pickle). Issue 29: a model of
    format 1 (saved before the format was written) loads and suggests the same; one
    missing a part its parameters name (a model saved before the estimator existed), or
    of a format this version does not read, is refused with the message to retrain."""
    files = sorted(p.name for p in (projects / "hybrid/model/quality").iterdir())
    assert files == ["data", "precision.txt", "quality.json", "recall.txt"]
    assert read_json(projects / "hybrid/model/recipe.json")["format"] == MODEL_FORMAT
    dev = noisy_records(30, seed=3)
    a = tag(Project.load(projects / "hybrid"), dev, limit=5)
    b = tag(Project.load(projects / "hybrid"), dev, limit=5)
    assert [t.quality for t in a] == [t.quality for t in b]
    assert any(t.quality is not None for t in a)

    def copy_with(name: str, meta_change) -> Path:
        folder = tmp_path / name
        shutil.copytree(projects / "hybrid", folder)
        meta = read_json(folder / "model/recipe.json")
        meta_change(meta)
        write_json_atomic(folder / "model/recipe.json", meta)
        return folder

    v1 = copy_with("v1", lambda m: m.pop("format"))
    c = tag(Project.load(v1), dev, limit=5)
    assert [(t.quality, [(s.id, s.score) for s in t.suggestions]) for t in c] == \
        [(t.quality, [(s.id, s.score) for s in t.suggestions]) for t in a]
    no_quality = copy_with("old", lambda m: m.pop("format"))
    shutil.rmtree(no_quality / "model/quality")
    with pytest.raises(ModelFormatError, match=r"no 'quality'.*retrain the project"):
        Project.load(no_quality)
    newer = copy_with("newer", lambda m: m.update(format=MODEL_FORMAT + 1))
    with pytest.raises(ModelFormatError, match=rf"model format {MODEL_FORMAT + 1}.*retrain"):
        Project.load(newer)


def test_recipe_without_estimator_reports_none(projects):
    tagged = tag(Project.load(projects / "lexical"), tiny_records(5, seed=4), limit=5)
    assert [t.quality for t in tagged] == [None] * 5 and all(t.suggestions for t in tagged)


def _write(path: Path, recs: list[Record]) -> Path:
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs), "utf-8")
    return path


def _lines(path: Path) -> dict[str, dict]:
    return {o["id"]: o for o in map(json.loads, path.read_text("utf-8").splitlines())}


def test_suggest_writes_quality_and_release_above_splits(projects, tmp_path):
    src = _write(tmp_path / "in.jsonl", [*noisy_records(60, seed=5), Record(id="blank", title="")])
    out = tmp_path / "pred.jsonl"
    res = runner.invoke(app, ["suggest", str(projects / "hybrid"), "-i", str(src), "-o",
                              str(out), "--limit", "3"])
    assert res.exit_code == 0, res.output
    every = _lines(out)
    assert "quality" not in every["blank"] and len(every) == 61
    recall = {rid: o["quality"]["recall"] for rid, o in every.items() if "quality" in o}
    bar = float(np.median(list(recall.values())))

    split = tmp_path / "split.jsonl"
    res = runner.invoke(app, ["suggest", str(projects / "hybrid"), "-i", str(src), "-o",
                              str(split), "--limit", "3", "--release-above", str(bar)])
    assert res.exit_code == 0, res.output
    released, review = _lines(split), _lines(tmp_path / "split.review.jsonl")
    assert set(released) == {rid for rid, r in recall.items() if r >= bar}
    assert set(review) == set(every) - set(released) and "blank" in review
    assert released == {rid: every[rid] for rid in released}  # the same lines, only routed
    assert f"{len(released)} released, {len(review)} to review" in res.output
    assert 0 < len(released) < 61


def test_review_path_and_flags():
    assert review_path("out/pred.jsonl") == Path("out/pred.review.jsonl")
    assert review_path("pred.jsonl.gz") == Path("pred.review.jsonl.gz")
    assert review_path("pred") == Path("pred.review")
    res = runner.invoke(app, ["suggest", "p", "-i", "x", "-o", "y", "--review", "r.jsonl"])
    assert res.exit_code == 1 and "--review goes with --release-above" in res.output


def test_tagalign_api_returns_quality_and_annif_api_does_not(projects, tmp_path):
    apps = {"h": Project.load(projects / "hybrid"), "lex": Project.load(projects / "lexical")}
    (tmp_path / "fb").mkdir()
    server = create_app(apps, FeedbackStore.for_project(tmp_path / "fb"))
    rec = noisy_records(1, seed=6)[0]
    with LiveServer(server) as live, httpx.Client(base_url=live.url, timeout=60) as http:
        url = "/tagalign/v1/projects"
        one = http.post(f"{url}/h/suggest", json={"title": rec.title,
                                                  "abstract": rec.abstract}).json()
        assert set(one["quality"]) == {"recall", "precision"}
        assert 0 <= one["quality"]["recall"] <= 1 and 0 <= one["quality"]["precision"] <= 1
        assert http.post(f"{url}/lex/suggest", json={"title": "Epos"}).json()["quality"] \
            is None
        batch = http.post(f"{url}/h/suggest-batch", json={"records": [
            {"title": rec.title, "abstract": rec.abstract}, {"title": " "}]}).json()
        assert batch["qualities"][0] == one["quality"] and batch["qualities"][1] is None
        annif = http.post("/v1/projects/h/suggest",
                          data={"text": rec.title + "\n" + rec.abstract}).json()
        assert set(annif) == {"results"} and annif["results"]


# -- eval --quality on hand-made predictions ---------------------------------------------
GOLD = [Record(id=f"d{i}", title="t", subjects=["a", "b"]) for i in range(4)]
#: true recall 1, 0.5, 0.5, 0 — estimates 0.9, 0.6, 0.4, 0.1 (same order: Spearman 1 with
#: the tie) — P@5 1/5·2, 1/5, 1/5, 0
PRED = [("d0", ["a", "b"], 0.9), ("d1", ["a", "x"], 0.6), ("d2", ["b"], 0.4),
        ("d3", ["y"], 0.1)]


def test_quality_report_known_values():
    rankings = {rid: ids for rid, ids, _ in PRED}
    rep = quality_report(GOLD, rankings, {rid: q for rid, _, q in PRED}, bins=2,
                         shares=(0.25, 0.5, 1.0))
    assert rep["n"] == 4 and rep["no_estimate"] == 0
    assert rep["spearman"] == pytest.approx(stats.spearmanr([0.9, 0.6, 0.4, 0.1],
                                                            [1, 0.5, 0.5, 0])[0])
    assert rep["pearson"] == pytest.approx(stats.pearsonr([0.9, 0.6, 0.4, 0.1],
                                                          [1, 0.5, 0.5, 0])[0])
    assert [(c["n"], c["mean_estimate"], c["mean_recall"]) for c in rep["calibration"]] == [
        (2, pytest.approx(0.25), pytest.approx(0.25)), (2, pytest.approx(0.75), 0.75)]
    top1, half, every = rep["release"]
    assert (top1["n"], top1["cutoff"], top1["recall@5"], top1["precision@5"]) == (
        1, 0.9, 1.0, pytest.approx(0.4))
    assert (half["n"], half["cutoff"], half["recall@5"]) == (2, 0.6, 0.75)
    assert every["recall@5"] == 0.5 and every["precision@5"] == pytest.approx(0.2)
    assert every["f1@5"] == pytest.approx(2 * 0.2 * 0.5 / 0.7)


def test_eval_quality_cli_prints_tables_and_plots(tmp_path):
    gold = _write(tmp_path / "gold.jsonl", GOLD)
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(json.dumps({"id": rid, "subjects": ids,
                                        "quality": {"recall": q, "precision": q}}) + "\n"
                            for rid, ids, q in PRED)
                    + json.dumps({"id": "d9", "subjects": []}) + "\n", "utf-8")
    png = tmp_path / "q.png"
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--quality", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "Spearman 0.949" in res.output and "calibration" in res.output
    assert "   50%      2    0.600  0.3000  0.7500  0.4286" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--quality", "--json"])
    rel = json.loads(res.output[res.output.index("{"):])["quality"]["release"]
    assert [r["n"] for r in rel] == [1, 1, 1, 2, 2, 2, 3, 3, 4, 4]


def test_excluded_subjects_keep_the_quality_estimate(projects):
    """Issue 30: a list with excluded subjects still gets an estimate (that of the list
    before the exclusion), so `--release-above` works for projects with exclude rules."""
    proj = Project.load(projects / "hybrid")
    dev = noisy_records(20, seed=5)
    whole = tag(proj, dev, limit=5)
    banned = {whole[0].suggestions[0].id}
    cut = tag(proj, dev, limit=5, exclude=banned)
    assert [t.quality for t in cut] == [t.quality for t in whole]
    assert any(t.quality is not None for t in cut)
    assert all(s.id not in banned for t in cut for s in t.suggestions)
    assert all(len(t.suggestions) == len(w.suggestions) for t, w in zip(cut, whole, strict=True))


def test_new_score_weights_retrain_the_estimate_on_the_scores_served(projects, tmp_path):
    """Issue 30: `hyperopt --save` changes `blend`'s weights after training; the estimator
    must learn the scores that are then served (it keeps what it learned from), and one that
    cannot (saved without that data) gives no estimate rather than a wrong one."""
    folder = tmp_path / "tuned"
    shutil.copytree(projects / "hybrid", folder)
    proj = Project.load(folder)
    before = proj.recipe.pipeline.quality
    # trained with the default weights (the unseen lift's), learned with them
    assert before.weights_ == HybridConfig().blend_weights == (0.0, 0.0, 0.75)
    assert before.data_ is not None
    weights = (0.2, 0.5, 1.5)
    served, _, _ = before.data_.profile(weights)
    raw, _, _ = before.data_.profile((0.0, 0.0, 0.0))
    assert not np.allclose(served.scores, raw.scores)  # the corrections move the scores
    proj.set_params({"prior_weight": weights[0], "support_weight": weights[1],
                     "unseen_weight": weights[2]})
    reloaded = Project.load(folder)
    after = reloaded.recipe.pipeline.quality
    assert after.weights_ == weights
    direct = QualityEstimator().fit_data(before.data_, weights)
    np.testing.assert_allclose([(q.recall, q.precision) for q in after.predict(served, 5, 0.1)],
                               [(q.recall, q.precision) for q in direct.predict(served, 5, 0.1)])
    dev = noisy_records(20, seed=6)
    assert all(t.quality is not None for t in tag(reloaded, dev, limit=5))
    # an estimator of other weights without its data: no estimates, not wrong ones
    (folder / "model/quality/quality.json").write_text(json.dumps({
        **json.loads((folder / "model/quality/quality.json").read_text()),
        "weights": [0.0, 0.0], "data": False}))
    assert all(t.quality is None for t in tag(Project.load(folder), dev, limit=5))


def test_estimate_reports_its_rounds_and_is_the_same_model_with_progress(projects):
    """Issue 63: each regressor's boosting rounds are reported (`boost`'s read-only
    callback), from 0 to the round count, and the trees are those fitted without it."""
    data = Project.load(projects / "hybrid").recipe.pipeline.quality.data_
    events: list[tuple[str, int, int]] = []
    plain = QualityEstimator(num_threads=1).fit_data(data, (0.0, 0.0))
    heard = QualityEstimator(num_threads=1).fit_data(data, (0.0, 0.0),
                                                     progress=lambda *e: events.append(e))
    for name in ("recall", "precision"):
        assert (heard.boosters_[name].model_to_string()
                == plain.boosters_[name].model_to_string())
        done = [d for phase, d, total in events if phase == f"quality {name}"
                and total == heard.config.num_rounds]
        assert done[0] == 0 and done[-1] == heard.config.num_rounds
        assert done[:-1] == list(range(done[-2] + 1))
    assert {phase for phase, _, _ in events} == {"quality recall", "quality precision"}
