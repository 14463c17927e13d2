"""The REST API on a real uvicorn server with a tiny deterministic recipe (no shared data).

Complements test_serve_api.py (the hybrid recipe on the GND): every error code, the
neighbour titles the API adds to id-only reasons, online learning and its fallback.
"""

from __future__ import annotations

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings
from tagalign.records import EMPTY_WARNING, MAX_TEXT_CHARS
from tagalign.serve.app import create_app
from tiny_models import tiny_records, tiny_vocab

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    train = tiny_records(40)
    online = Project.create(root / "toy", tiny_vocab(), "test-overlap")
    online.train(train)
    offline = Project.create(root / "frozen", tiny_vocab(), "test-overlap", {"online": False})
    offline.train(train)
    records = {r.id: r for r in train}
    # these tests learn through the server
    toy = Project.load(root / "toy", serving=ServingSettings(allow_learn=True))
    offline = offline.with_serving(ServingSettings(allow_learn=True))
    app = create_app({"toy": toy, "frozen": offline},
                     FeedbackStore.for_project(root / "toy"), records, max_body=1_000_000)
    with LiveServer(app) as live:
        live.db = root / "toy" / "feedback.sqlite"
        live.records = records
        yield live


def _rows(db, record_id: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("select project, subject_id, decision, title from decisions "
                            "where record_id=? order by id", (record_id,)).fetchall()


def test_suggest_ranks_and_names_neighbour_titles(toy):
    res = httpx.post(f"{toy.url}/tagalign/v1/projects/toy/suggest",
                     json={"title": "Pilze", "abstract": "fungi rot timber", "limit": 3})
    assert res.status_code == 200, res.text
    results = res.json()["results"]
    assert results[0]["id"] == "4046076-9" and results[0]["label"] == "Pilze"
    assert results[0]["reasons"]["label_match"] == "Pilze"
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    nbrs = results[0]["reasons"]["neighbours"]
    # the recipe names neighbours by id only; the API adds titles from the records file
    assert nbrs and all(n["title"] == toy.records[n["id"]].title for n in nbrs)
    batch = httpx.post(f"{toy.url}/tagalign/v1/projects/toy/suggest-batch", json={"records": [
        {"title": "Pilze"}, {"title": "Philosophie", "language": "en"}], "limit": 1}).json()
    assert [[s["id"] for s in row] for row in batch["results"]] == [["4046076-9"],
                                                                  ["4045791-6"]]


def test_learned_record_is_a_neighbour_at_once(toy):
    text = {"title": "Quasare am Nachthimmel", "abstract": "telescope quasar redshift survey"}
    before = httpx.post(f"{toy.url}/tagalign/v1/projects/toy/suggest", json=text).json()["results"]
    assert "4068097-6" not in [s["id"] for s in before]
    res = httpx.post(f"{toy.url}/tagalign/v1/projects/toy/learn", json={"records": [
        {"id": "learned-1", **text, "language": "de", "subjects": ["4068097-6"],
         "rejected": ["4045791-6"]}]})
    assert res.status_code == 200 and res.json() == {"stored": 2, "learned": True}
    assert _rows(toy.db, "learned-1") == [
        ("toy", "4068097-6", "accept", text["title"]),
        ("toy", "4045791-6", "reject", text["title"])]
    after = httpx.post(f"{toy.url}/tagalign/v1/projects/toy/suggest",
                       json={**text, "abstract": text["abstract"] + " quasars"}).json()
    hit = next(s for s in after["results"] if s["id"] == "4068097-6")
    assert {"id": "learned-1", "title": text["title"]} in hit["reasons"]["neighbours"]


def test_learn_unsupported_still_stores(toy):
    res = httpx.post(f"{toy.url}/tagalign/v1/projects/frozen/learn", json={"records": [
        {"id": "frozen-1", "title": "Epos", "subjects": ["4015065-3"]}]})
    assert res.status_code == 200 and res.json() == {"stored": 1, "learned": False}
    assert _rows(toy.db, "frozen-1") == [("frozen", "4015065-3", "accept", "Epos")]


SUGGEST = "/tagalign/v1/projects/toy/suggest"
BATCH = "/tagalign/v1/projects/toy/suggest-batch"
LEARN = "/tagalign/v1/projects/toy/learn"


def test_a_body_not_declared_json_is_415(toy):
    # no content type: a browser may send it cross-site without a preflight (serve.guard)
    res = httpx.post(toy.url + SUGGEST, content=b'{"title": "x"}')
    assert res.status_code == 415 and "application/json" in res.json()["detail"]


@pytest.mark.parametrize("path, kwargs, field", [
    (SUGGEST, {"json": {"abstract": "no title"}}, "title"),
    (LEARN, {"json": {"records": [{"id": "r", "title": "  ", "subjects": []}]}},
     "records.0.title"),
    (SUGGEST, {"json": {"title": None}}, "title"),
    (SUGGEST, {"json": {"title": "x", "limit": -1}}, "limit"),
    (SUGGEST, {"json": {"title": "x", "limit": 10**30}}, "limit"),
    (SUGGEST, {"json": {"title": "x", "language": "fr"}}, "language"),
    (SUGGEST, {"json": {"title": "x", "extra": 1}}, "extra"),
    (SUGGEST, {"content": b'{"title": "x", "threshold": NaN}', "headers": JSON}, "threshold"),
    (SUGGEST, {"json": [1, 2]}, "body"),
    (SUGGEST, {"content": b"{not json", "headers": JSON}, "body"),
    (SUGGEST, {"content": b'{"title": "\xff\xfe"}', "headers": JSON}, "body"),
    (SUGGEST, {"content": b"", "headers": JSON}, "body"),
    (BATCH, {"json": {"records": [{"title": "x"}] * 257}},
     "records"),
    (BATCH, {"json": {"records": [{"title": "x"}, {"id": "b"}]}},
     "records.1.title"),
    (LEARN, {"json": {"records": [{"id": "r", "title": "x",
                                                     "subjects": ["0000000-0"]}]}},
     "0000000-0"),
    (LEARN, {"json": {"records": [{"id": "r", "title": "x", "subjects": [
        "4015065-3"], "rejected": ["4015065-3"]}]}}, "4015065-3"),
    (LEARN, {"json": {"records": [{"title": "x", "subjects": []}]}},
     "records.0.id"),
])
def test_bad_input_is_422_naming_the_field(toy, path, kwargs, field):
    res = httpx.post(toy.url + path, **kwargs)
    assert res.status_code == 422, res.text
    assert field in res.json()["detail"]


def test_unknown_project_and_record_are_404(toy):
    for path in ("suggest", "suggest-batch", "learn"):
        res = httpx.post(f"{toy.url}/tagalign/v1/projects/nope/{path}", json={
            "title": "x", "records": [{"id": "a", "title": "x", "subjects": []}]})
        # the body is validated first for the endpoint's schema; a valid one gets 404
        assert res.status_code in (404, 422)
    assert httpx.post(f"{toy.url}/tagalign/v1/projects/nope/suggest",
                      json={"title": "x"}).status_code == 404
    assert httpx.post(f"{toy.url}/tagalign/v1/projects/nope/learn", json={"records": [
        {"id": "a", "title": "x", "subjects": []}]}).status_code == 404
    assert httpx.get(f"{toy.url}/tagalign/v1/projects/nope").status_code == 404
    assert httpx.get(f"{toy.url}/tagalign/v1/records/nope").status_code == 404
    assert httpx.get(f"{toy.url}/tagalign/v1/records/r3").json()["title"] == toy.records["r3"].title


def test_bodies_over_1mb_are_413(toy):
    url = toy.url + SUGGEST
    big = json.dumps({"title": "x", "abstract": "a" * 1_000_001}).encode()
    assert httpx.post(url, content=big, headers=JSON).status_code == 413

    def chunks():  # no Content-Length: the streamed size is counted
        for _ in range(11):
            yield b" " * 100_000
    assert httpx.post(url, content=chunks(), headers=JSON).status_code == 413
    ok = json.dumps({"records": [{"title": "Pilze", "abstract": "a" * 90_000}] * 10}).encode()
    assert 900_000 < len(ok) < 1_000_000
    assert httpx.post(toy.url + "/tagalign/v1/projects/toy/suggest-batch", content=ok,
                      headers=JSON).status_code == 200


def test_projects_health_and_docs(toy):
    health = httpx.get(f"{toy.url}/tagalign/v1/health").json()
    assert (health["status"], health["projects"], list(health["checks"])) == (
        "ok", 2, ["toy", "frozen"])
    ids = [p["id"] for p in httpx.get(f"{toy.url}/tagalign/v1/projects").json()["projects"]]
    assert ids == ["toy", "frozen"]
    info = httpx.get(f"{toy.url}/tagalign/v1/projects/toy").json()
    assert info["recipe"] == "test-overlap" and info["vocabulary_size"] == 8
    assert info["trained_at"] and sorted(info["languages"]) == ["de", "en"]
    assert "/tagalign/v1/projects/{project_id}/suggest" in httpx.get(
        f"{toy.url}/openapi.json").json()["paths"]
    assert httpx.get(f"{toy.url}/docs").status_code == 200
    page = httpx.get(f"{toy.url}/")
    assert page.status_code == 200 and 'src="/static/app.js"' in page.text
    assert "http" not in page.text.split("<body>")[1]  # nothing loaded from outside


def test_16_concurrent_requests(toy):
    texts = [r.text for r in list(toy.records.values())[:16]]

    def one(text):
        return httpx.post(toy.url + SUGGEST, json={"title": text}, timeout=30).status_code

    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(one, texts)) == [200] * 16


def test_blank_record_gets_no_suggestions_and_a_warning(toy):
    res = httpx.post(toy.url + SUGGEST, json={"title": "  ", "abstract": "\n"})
    assert res.status_code == 200
    assert res.json() == {"results": [], "warning": EMPTY_WARNING, "quality": None,
                          "domains": None}
    ok = httpx.post(toy.url + SUGGEST, json={"title": "Pilze"}).json()
    assert ok["results"] and ok["warning"] is None
    batch = httpx.post(toy.url + BATCH, json={"records": [
        {"title": "Pilze"}, {"title": ""}, {"title": "Holzschutz"}]}).json()
    assert [bool(r) for r in batch["results"]] == [True, False, True]
    assert batch["warnings"] == [None, EMPTY_WARNING, None]
    long = {"title": "Pilze", "abstract": "fungi " * (MAX_TEXT_CHARS // 6 + 10)}
    res = httpx.post(toy.url + SUGGEST, json=long).json()
    n = len(long["title"]) + len(long["abstract"])
    assert res["results"] and res["warning"] == (
        f"text truncated to {MAX_TEXT_CHARS:,} of {n:,} characters")
