"""Where feedback lives: `tagalign serve`, `tagalign train --feedback` and `tagalign
feedback export` find a project's decisions in the same place (`feedback_location`), also
when a projects file serves it under an id other than its folder's name, when it is not
the first project served, and in one shared store given as a URL."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from tagalign.cli import app
from tagalign.project import Project
from tagalign.records import read_records
from tagalign.records.convert import write_jsonl
from tagalign.serve import server
from tiny_models import tiny_records, tiny_vocab

runner = CliRunner()
TOML = """
[library]
recipe = "test-overlap"
path = "folders/lib-folder"
allow_learn = true

[second]
recipe = "test-overlap"
allow_learn = true
"""


@pytest.fixture()
def deployment(tmp_path):
    for folder in ("folders/lib-folder", "second"):
        Project.create(tmp_path / folder, tiny_vocab(), "test-overlap").train(tiny_records(20))
    (tmp_path / "projects.toml").write_text(TOML, encoding="utf-8")
    write_jsonl(tmp_path / "train.jsonl", tiny_records(20))
    return tmp_path


def _serve(monkeypatch, args: list[str]):
    """The app `tagalign serve ARGS` would run (uvicorn not started)."""
    apps = []
    monkeypatch.setattr(server, "run_server", lambda app_, *a: apps.append(app_))
    res = runner.invoke(app, ["serve", *args])
    assert res.exit_code == 0, res.output
    return apps[0]


@pytest.mark.parametrize("where", ["own", "url", "file-key"])
def test_decisions_made_through_serve_are_found_by_train_and_export(deployment, monkeypatch,
                                                                    where):
    """own: each project's feedback.sqlite; url: --feedback-db given to all three
    commands; file-key: the projects file's feedback_db (one store for both)."""
    root = deployment
    toml = str(root / "projects.toml")
    db = ["--feedback-db", f"sqlite:///{root / 'shared.sqlite'}"] if where == "url" else []
    if where == "file-key":
        (root / "projects.toml").write_text(TOML.replace(
            "allow_learn = true", 'allow_learn = true\nfeedback_db = "shared.sqlite"'))
    client = TestClient(_serve(monkeypatch, ["--projects", toml, *db]), base_url="http://localhost")
    for pid, sid in (("library", "4046076-9"), ("second", "4015065-3")):
        res = client.post(f"/tagalign/v1/projects/{pid}/learn", json={"records": [
            {"id": f"fb-{pid}", "title": f"Rückmeldung {pid}", "abstract": "fungi epic",
             "language": "de", "subjects": [sid]}]})
        assert res.status_code == 200, res.text
    for pid, folder in (("library", "folders/lib-folder"), ("second", "second")):
        res = runner.invoke(app, ["train", pid, "--projects", toml,
                                  "--train", str(root / "train.jsonl"), *db])
        assert res.exit_code == 0, res.output
        trained = json.loads((root / folder / "model/records.json").read_text())
        assert f"fb-{pid}" in {row["id"] for row in trained}
        out = root / f"{pid}.jsonl"
        res = runner.invoke(app, ["feedback", "export", pid, "--projects", toml,
                                  "--out", str(out), *db])
        assert res.exit_code == 0, res.output
        assert [r.id for r in read_records(out)] == [f"fb-{pid}"]
    assert (root / "shared.sqlite").exists() == (where != "own")
