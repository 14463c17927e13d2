"""Tuning a trained project: saved limit/threshold (`optimize --save`) used by `suggest` and
both REST APIs, and `hyperopt`'s suggest-time parameters, on a tiny hybrid (seconds)."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
from typer.testing import CliRunner

from serving import LiveServer
from suggesting import suggestions
from tagalign.cli import app
from tagalign.feedback import FeedbackStore
from tagalign.project import Project
from tagalign.records import Record
from tagalign.serve.app import create_app
from tiny_models import tiny_records, tiny_vocab

TINY = {"sources": ["omikuji", "tfidf_knn", "lexical"], "ranker_rounds": 40,
        "holdout_fraction": 0.3, "knn_k": 10, "candidates_per_source": 6}
TRIAL = {"candidates_omikuji": 2, "candidates_tfidf_knn": 3, "prior_weight": 0.3,
         "support_weight": 1.0}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("tuning")
    project = Project.create(root / "proj", tiny_vocab(), "hybrid", TINY)
    project.train(tiny_records(300, seed=0))
    dev = tiny_records(60, seed=1)
    for r in dev:
        r.id = "dev-" + r.id
    path = root / "dev.jsonl"
    path.write_text("".join(json.dumps({"id": r.id, "title": r.title, "abstract": r.abstract,
                                        "language": r.language, "subjects": r.subjects}) + "\n"
                            for r in dev))
    return root, dev, path


def fresh(root, name: str) -> Project:
    """A copy of the trained project, so tests that save into it stay independent."""
    import shutil

    shutil.copytree(root / "proj", root / name)
    return Project.load(root / name)


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_optimize_save_changes_cli_suggest(trained, tmp_path):
    root, dev, dev_path = trained
    project = fresh(root, "opt")
    runner = CliRunner()
    before = tmp_path / "before.jsonl"
    assert runner.invoke(app, ["suggest", str(project.path), "-i", str(dev_path), "-o",
                               str(before)]).exit_code == 0
    # no saved defaults: 20 asked, all 8 subjects of the tiny vocabulary that have a score
    assert max(len(x["subjects"]) for x in lines(before)) > 3
    res = runner.invoke(app, ["optimize", str(project.path), "--input", str(dev_path),
                              "--save", "--json", "--plot", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    best = json.loads(res.stdout)["all"]["best"]["f1"]
    config = Project.read_config(project.path)
    assert (config["limit"], config["threshold"]) == (best["limit"], best["threshold"])
    assert best["limit"] <= 3  # every record has 2 gold subjects
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    after = tmp_path / "after.jsonl"
    assert runner.invoke(app, ["suggest", str(project.path), "-i", str(dev_path), "-o",
                               str(after)]).exit_code == 0
    explicit = tmp_path / "explicit.jsonl"
    assert runner.invoke(app, ["suggest", str(project.path), "-i", str(dev_path), "-o",
                               str(explicit), "--limit", str(best["limit"]), "--threshold",
                               str(best["threshold"])]).exit_code == 0
    assert lines(after) == lines(explicit)
    for row in lines(after):
        assert len(row["subjects"]) <= best["limit"]
        assert all(s["score"] >= best["threshold"] for s in row["subjects"])
    # a limit given on the command line still wins
    wide = tmp_path / "wide.jsonl"
    runner.invoke(app, ["suggest", str(project.path), "-i", str(dev_path), "-o", str(wide),
                        "--limit", "20", "--threshold", "0"])
    assert lines(wide) == lines(before)


def test_per_language_defaults(trained):
    root, dev, _ = trained
    project = fresh(root, "lang")
    project.set_defaults(1, 0.0, language="en")
    project.set_defaults(3, 0.0, language="de")
    rows = suggestions(Project.load(project.path), dev)
    for rec, row in zip(dev, rows, strict=True):
        assert len(row) == (1 if rec.language == "en" else 3), rec.language
    with pytest.raises(ValueError, match="threshold in"):
        project.set_defaults(2, 1.5)


def test_rest_apis_use_saved_defaults(trained, tmp_path):
    root, _, _ = trained
    project = fresh(root, "rest")
    project.set_defaults(2, 0.0)
    store = FeedbackStore.for_project(project.path)
    text = {"title": "Epos", "abstract": "epic hero poem saga data software computer"}
    # a generous timeout: the first request loads the language identifier on a busy machine
    with LiveServer(create_app({"p": project}, store)) as live, \
            httpx.Client(base_url=live.url, timeout=120) as http:
        ours = "/tagalign/v1/projects/p/suggest"
        assert len(http.post(ours, json=text).json()["results"]) == 2
        assert len(http.post(ours, json={**text, "limit": 4}).json()["results"]) == 4
        annif = "/v1/projects/p/suggest"
        form = {"text": text["title"] + "\n" + text["abstract"]}
        assert len(http.post(annif, data=form).json()["results"]) == 2
        assert len(http.post(annif, data={**form, "limit": 4}).json()["results"]) == 4
        batch = http.post("/v1/projects/p/suggest-batch",
                          json={"documents": [{"text": form["text"]}]}).json()
        assert len(batch[0]["results"]) == 2


def test_trials_match_suggest_and_saved_params(trained):
    root, dev, _ = trained
    project = fresh(root, "params")
    recipe = project.recipe
    run = recipe.trial_run(dev, 8)
    # the current parameters: exactly what suggest returns (ids and scores)
    current = run(recipe.tuned_values())

    def served(p: Project) -> list[list[tuple[str, float]]]:
        return [[(s.id, s.score) for s in row]
                for row in suggestions(p, dev, limit=8, threshold=0.0)]

    assert current == served(project)
    tuned = run(TRIAL)
    assert tuned != current
    project.set_params(TRIAL)
    again = Project.load(project.path)  # the saved parameters survive a reload
    for p in (project, again):
        assert served(p) == tuned
    assert again.params["candidates_omikuji"] == 2
    # the model's manifest holds the one copy of the parameters; the config their names
    assert "params" not in Project.read_config(project.path)
    assert Project.read_config(project.path)["tuned_params"] == sorted(TRIAL)


def test_hyperopt_resumes_from_storage_and_saves(trained, tmp_path):
    root, _, dev_path = trained
    project = fresh(root, "hyp")
    db = tmp_path / "study.db"
    runner = CliRunner()
    args = ["hyperopt", str(project.path), "--input", str(dev_path), "--storage",
            f"sqlite:///{db}", "--metric", "f1@5"]
    res = runner.invoke(app, [*args, "--trials", "3"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, [*args, "--trials", "5", "--results-file",
                              str(tmp_path / "t.tsv"), "--save"])
    assert res.exit_code == 0, res.output
    assert "2 trials run in" in res.stdout  # the resumed study ran only the missing ones
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from trials").fetchone()[0] == 5
    table = (tmp_path / "t.tsv").read_text().splitlines()
    assert len(table) == 6 and table[0].startswith("trial\tf1@5\tcandidates_omikuji")
    params = [tuple(row.split("\t")[2:]) for row in table[1:]]
    assert len(set(params)) == 5  # resuming did not replay the first trials
    best = json.loads(res.stdout[res.stdout.index("{"):])
    saved = Project.load(project.path)
    assert {k: saved.recipe.params[k] for k in best} == best
    assert saved.recipe.pipeline.prior_weight == best["prior_weight"]


def test_hyperopt_without_search_space(trained, tmp_path):
    root, _, dev_path = trained
    project = Project.create(tmp_path / "lex", tiny_vocab(), "lexical")
    project.train([Record(id="x", title="Epos", subjects=["4015065-3"])] * 3)
    res = CliRunner().invoke(app, ["hyperopt", str(project.path), "--input", str(dev_path)])
    assert res.exit_code == 1
    assert "has no tunable parameters" in res.stderr


def test_topk_ties_broken_by_subject_position():
    """A source run wide and truncated (hyperopt) equals a narrow run, ties included."""
    import numpy as np
    import scipy.sparse as sp

    from tagalign.suggest.sources.base import topk_per_row

    # one row, stored out of column order, four subjects tied at 0.5
    S = sp.csr_matrix((np.array([0.5, 0.5, 0.9, 0.5, 0.5, 0.1]),
                       np.array([7, 5, 1, 3, 0, 2]), np.array([0, 6])), shape=(1, 8))
    assert topk_per_row(S, 3)[1].tolist() == [1, 0, 3]
    assert topk_per_row(S, 6)[1][:3].tolist() == [1, 0, 3]


def test_tuned_project_still_opens_for_training(trained):
    """`tagalign train` rerun with the original parameters continues a tuned project."""
    root, _, _ = trained
    project = fresh(root, "retrain")
    project.set_params({"prior_weight": 0.1})
    again = Project.create(project.path, project.vocab, "hybrid", TINY)
    assert again.params["prior_weight"] == 0.1
    from tagalign.project import ProjectError

    with pytest.raises(ProjectError, match="already holds"):
        Project.create(project.path, project.vocab, "hybrid", {**TINY, "knn_k": 5})
