"""Both REST APIs over one service (`tagalign.serve.service`): the same record gets the same
subjects and scores from ``/tagalign/v1`` and Annif's ``/v1``, the own API's default limit
is the project's, and one error maps to one status in each API's shape."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tagalign.errors import ConflictError, InputError
from tagalign.feedback import FeedbackStore
from tagalign.project import DEFAULT_LIMIT, Project, ServingSettings, Tagger
from tagalign.recipes import Recipe, register_recipe
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.serve.service import ANNIF_DEFAULT_LIMIT, OWN_DEFAULT_LIMIT, http_status
from tagalign.suggest import Suggestion
from tagalign.vocab import GND_URI, Subject, Vocabulary

TEXT = {"title": "Holzschutz gegen Pilze", "abstract": "fungi wood rot timber"}
ANNIF_TEXT = TEXT["title"] + "\n" + TEXT["abstract"]


@register_recipe
class RankedRecipe(Recipe):
    """Every subject, scored by a hash of its id and the text: ``limit`` of them always."""

    name = "test-ranked"

    def fit(self, records: Sequence[Record], *, workdir: Path,
            dev: Sequence[Record] | None = None) -> None:
        pass

    def _suggest(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        return [self._one(r, limit) for r in records]

    def _one(self, rec: Record, limit: int) -> list[Suggestion]:
        def score(sid: str) -> float:
            digest = hashlib.sha256(f"{sid}|{rec.title}|{rec.abstract}".encode()).digest()
            return int.from_bytes(digest[:4], "big") / 2**32

        ranked = sorted(((score(s.id), s.id) for s in self.vocab), reverse=True)[:limit]
        return [Suggestion(sid, sc, sid) for sc, sid in ranked]

    def _save_state(self, path: Path) -> None:
        (path / "empty").write_text("", encoding="utf-8")

    def _load_state(self, path: Path) -> None:
        pass


@pytest.fixture
def served(tmp_path):
    vocab = Vocabulary(Subject(f"4{i:06d}-0", {"de": f"Thema {i}", "en": f"topic {i}"})
                       for i in range(60))
    project = Project.create(tmp_path / "p", vocab, "test-ranked")
    project.train([])
    project = Project.load(tmp_path / "p")
    client = TestClient(create_app({"p": project}, FeedbackStore.for_project(project.path)),
                        base_url="http://localhost")  # Host is checked (serve.guard)
    return project, client


def ours(client: TestClient, **extra: Any) -> list[tuple[str, float]]:
    res = client.post("/tagalign/v1/projects/p/suggest", json={**TEXT, **extra})
    assert res.status_code == 200, res.text
    return [(r["id"], r["score"]) for r in res.json()["results"]]


def annifs(client: TestClient, **extra: Any) -> list[tuple[str, float]]:
    res = client.post("/v1/projects/p/suggest", data={"text": ANNIF_TEXT, **extra})
    assert res.status_code == 200, res.text
    return [(r["uri"].removeprefix(GND_URI), r["score"]) for r in res.json()["results"]]


def test_both_apis_give_the_same_subjects_and_scores(served):
    _, client = served
    for extra in ({"limit": 15}, {"limit": 15, "threshold": 0.5}, {"limit": 1}):
        assert ours(client, **extra) == annifs(client, **extra), extra
    batch = client.post("/v1/projects/p/suggest-batch?limit=15",
                        json={"documents": [{"text": ANNIF_TEXT}]}).json()
    assert [(r["uri"].removeprefix(GND_URI), r["score"]) for r in batch[0]["results"]] == \
        ours(client, limit=15)


def test_default_limits_are_the_projects(served):
    project, client = served
    assert OWN_DEFAULT_LIMIT == DEFAULT_LIMIT == 20
    assert len(ours(client)) == DEFAULT_LIMIT
    # Annif's /v1 keeps the default of Annif's OpenAPI document
    assert len(annifs(client)) == ANNIF_DEFAULT_LIMIT == 10
    assert annifs(client) == ours(client)[:ANNIF_DEFAULT_LIMIT]
    # a projects file's limit: both APIs take it
    limited = project.with_serving(ServingSettings(limit=7))
    client = TestClient(create_app({"p": limited}, FeedbackStore.for_project(project.path)),
                        base_url="http://localhost")
    assert len(ours(client)) == len(annifs(client)) == 7


def test_one_status_per_error_in_each_apis_shape(served, monkeypatch):
    project, client = served
    assert http_status(ConflictError("x")) == 409

    def refuse(*_args: Any, **_kwargs: Any):
        raise InputError("no such thing")

    monkeypatch.setattr(Tagger, "tag", refuse)
    own = client.post("/tagalign/v1/projects/p/suggest", json=TEXT)
    assert (own.status_code, own.json()) == (400, {"detail": "no such thing"})
    annif = client.post("/v1/projects/p/suggest", data={"text": ANNIF_TEXT})
    assert annif.status_code == 400
    assert annif.headers["content-type"] == "application/problem+json"
    assert annif.json() == {"type": "about:blank", "title": "Bad Request", "status": 400,
                            "detail": "no such thing"}
    missing = client.get("/v1/projects/nope")
    assert (missing.status_code, missing.json()["title"]) == (404, "Project not found")
    assert client.get("/tagalign/v1/projects/nope").json() == {
        "detail": "project 'nope' not found; known: p"}


#: every route that names a project, with a request it answers (some refuse it: learn is
#: not allowed here, there is no review queue); Annif's suggest was 4 lookups before
PROJECT_ROUTES = [
    ("get", "/tagalign/v1/projects/p", {}),
    ("post", "/tagalign/v1/projects/p/suggest", {"json": TEXT}),
    ("post", "/tagalign/v1/projects/p/suggest-batch", {"json": {"records": [TEXT, TEXT]}}),
    ("post", "/tagalign/v1/projects/p/learn",
     {"json": {"records": [{"id": "r", "title": "t", "subjects": []}]}}),
    ("post", "/tagalign/v1/projects/p/reload", {"json": {}}),
    ("get", "/tagalign/v1/projects/p/subjects", {"params": {"prefix": "Thema"}}),
    ("get", "/tagalign/v1/projects/p/decisions", {}),
    ("get", "/tagalign/v1/projects/p/queue/0", {}),
    ("get", "/v1/projects/p", {}),
    ("post", "/v1/projects/p/suggest", {"data": {"text": ANNIF_TEXT}}),
    ("post", "/v1/projects/p/suggest-batch", {"json": {"documents": [{"text": ANNIF_TEXT}]}}),
    ("post", "/v1/projects/p/learn", {"json": [{"text": ANNIF_TEXT, "subjects": []}]}),
]


@pytest.mark.parametrize("method, path, kwargs", PROJECT_ROUTES)
def test_a_request_looks_its_project_up_once(served, monkeypatch, method, path, kwargs):
    from tagalign.serve.service import Service

    _, client = served
    found: list[str] = []
    lookup = Service.served
    monkeypatch.setattr(Service, "served", lambda self, pid: found.append(pid) or lookup(
        self, pid))
    res = getattr(client, method)(path, **kwargs)
    assert res.status_code < 500, res.text
    assert found == ["p"], (res.status_code, found)


def test_a_bad_request_for_an_unknown_project_is_answered_as_bad(served):
    """The project is looked up after the body and parameters are read (as before the
    routers took it as a dependency): a malformed request is 422 (Annif's 400), not 404."""
    _, client = served
    assert client.post("/tagalign/v1/projects/nope/suggest", json={"limit": 3}
                       ).status_code == 422
    assert client.get("/tagalign/v1/projects/nope/subjects").status_code == 422
    assert client.post("/v1/projects/nope/suggest", data={"limit": "3"}).status_code == 400
    assert client.post("/tagalign/v1/projects/nope/suggest", json=TEXT).status_code == 404
    assert client.post("/v1/projects/nope/suggest", data={"text": "x"}).status_code == 404
