"""The REST API against a real uvicorn server on localhost, with real HTTP requests."""

from __future__ import annotations

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from serving import LiveServer, MetricSamples, copy_project
from tagalign.feedback import FeedbackStore
from tagalign.project import ServingSettings
from tagalign.records import read_records
from tagalign.serve.app import create_app


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_data, small_project):
    path = tmp_path_factory.mktemp("serve") / "gnd"
    project = copy_project(small_project, path)
    # the feedback tests learn through the server
    project = project.with_serving(ServingSettings(allow_learn=True))
    store = FeedbackStore.for_project(path)
    dev = {r.id: r for r in read_records(shared_data / "llms4subjects/dev.jsonl.gz", limit=50)}
    with LiveServer(create_app({"gnd": project}, store, dev, max_body=1_000_000)) as live:
        live.project_path = path
        live.dev = dev
        yield live


def test_health_and_projects(server):
    assert httpx.get(f"{server.url}/tagalign/v1/health").json()["status"] == "ok"
    projects = httpx.get(f"{server.url}/tagalign/v1/projects").json()["projects"]
    assert projects[0]["id"] == "gnd" and projects[0]["recipe"] == "hybrid"
    info = httpx.get(f"{server.url}/tagalign/v1/projects/gnd").json()
    assert info["vocabulary_size"] == 204_569 and info["trained_at"]
    assert httpx.get(f"{server.url}/docs").status_code == 200


def test_suggest_and_batch(server):
    body = {"title": "Schäden durch Pilze an Fachwerkgebäuden",
            "abstract": "Holzschutz und Denkmalpflege bei Fachwerkhäusern", "language": "de",
            "limit": 5}
    res = httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest", json=body)
    assert res.status_code == 200, res.text
    results = res.json()["results"]
    assert 0 < len(results) <= 5
    assert {"id", "label", "score", "reasons"} <= set(results[0])
    assert results[0]["score"] >= results[-1]["score"]
    recs = [{"id": r.id, "title": r.title, "abstract": r.abstract} for r in
            list(server.dev.values())[:20]]
    res = httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest-batch",
                     json={"records": recs, "limit": 3}, timeout=60)
    assert res.status_code == 200 and len(res.json()["results"]) == 20
    assert all(len(r) <= 3 for r in res.json()["results"])
    assert httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest",
                      json={**body, "threshold": 0.99}).json()["results"] == []


@pytest.mark.parametrize("body, field", [
    ({"abstract": "no title"}, "title"),
    ({"title": "x", "limit": -1}, "limit"),
    ({"title": "x", "language": "fr"}, "language"),
    ({"title": "x", "extra": 1}, "extra"),
])
def test_bad_fields_are_422_naming_the_field(server, body, field):
    res = httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest", json=body)
    assert res.status_code == 422
    assert field in res.json()["detail"]


def test_errors_never_500(server):
    url = f"{server.url}/tagalign/v1/projects/gnd/suggest"
    bad_json = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert bad_json.status_code == 422
    assert httpx.post(f"{server.url}/tagalign/v1/projects/nope/suggest",
                      json={"title": "x"}).status_code == 404
    big = json.dumps({"title": "x", "abstract": "a" * 1_100_000}).encode()
    assert httpx.post(url, content=big, headers={"content-type": "application/json"}
                      ).status_code == 413

    def chunks():  # no Content-Length: the streamed size is checked too
        for _ in range(12):
            yield b" " * 100_000
    assert httpx.post(url, content=chunks(), headers={"content-type": "application/json"}
                      ).status_code == 413
    too_many = {"records": [{"title": "x"}] * 257}
    assert httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest-batch",
                      json=too_many).status_code == 422
    res = httpx.post(f"{server.url}/tagalign/v1/projects/gnd/learn", json={"records": [
        {"id": "r", "title": "x", "subjects": ["0000000-0"]}]})
    assert res.status_code == 422 and "0000000-0" in res.json()["detail"]
    assert httpx.get(f"{server.url}/tagalign/v1/records/unknown").status_code == 404


def test_concurrent_requests(server):
    recs = list(server.dev.values())[:16]

    def one(r):
        return httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest",
                          json={"title": r.title, "abstract": r.abstract}, timeout=60)

    with ThreadPoolExecutor(16) as pool:
        codes = [res.status_code for res in pool.map(one, recs)]
    assert codes == [200] * 16


def test_learn_is_stored_and_used_at_once(server):
    known = list(server.dev.values())[7]  # a real record's words, a subject it lacks
    rec = {"id": "learned-42", "title": known.title, "abstract": known.abstract,
           "language": known.language, "subjects": ["4015065-3"], "rejected": ["4123065-6"]}
    res = httpx.post(f"{server.url}/tagalign/v1/projects/gnd/learn", json={"records": [rec]})
    assert res.status_code == 200 and res.json() == {"stored": 2, "learned": True}
    with sqlite3.connect(server.project_path / "feedback.sqlite") as db:
        rows = db.execute("select record_id, subject_id, decision from decisions "
                          "where record_id='learned-42' order by id").fetchall()
    assert rows == [("learned-42", "4015065-3", "accept"), ("learned-42", "4123065-6", "reject")]
    res = httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest",
                     json={"title": rec["title"], "abstract": rec["abstract"], "limit": 30})
    hit = [s for s in res.json()["results"] if s["id"] == "4015065-3"]
    assert hit and any(n["id"] == "learned-42" for n in hit[0]["reasons"]["neighbours"])


def test_fetch_record(server):
    rid, rec = next(iter(server.dev.items()))
    body = httpx.get(f"{server.url}/tagalign/v1/records/{rid}").json()
    assert body["title"] == rec.title and body["subjects"] == rec.subjects


def test_metrics_hold_the_hybrids_quality_estimates(server):
    """The hybrid's own estimator feeds ``tagalign_quality_*_estimate`` (issue 31)."""
    def scrape() -> MetricSamples:
        return MetricSamples(httpx.get(f"{server.url}/metrics").text)

    recs = [{"title": r.title, "abstract": r.abstract} for r in list(server.dev.values())[:5]]
    before = scrape()
    res = httpx.post(f"{server.url}/tagalign/v1/projects/gnd/suggest-batch",
                     json={"records": recs, "limit": 5})
    after = scrape()
    quality = res.json()["qualities"]
    assert res.status_code == 200 and all(q is not None for q in quality)
    for what in ("recall", "precision"):
        name = f"tagalign_quality_{what}_estimate"
        assert after(f"{name}_count", project="gnd") - before(f"{name}_count",
                                                               project="gnd") == 5
        # the answer rounds to 4 decimals
        assert after(f"{name}_sum", project="gnd") - before(f"{name}_sum", project="gnd") \
            == pytest.approx(sum(q[what] for q in quality), abs=5 * 5e-5)
    assert after("tagalign_suggestions_total", project="gnd") - before(
        "tagalign_suggestions_total", project="gnd") == sum(map(len, res.json()["results"]))
