"""How a server says it is (issue 64): ``/tagalign/v1/health``, ``/health/live``,
``/health/ready``, the project's ``learning`` and the feedback store's gauges in
``/metrics``, on a real server on localhost whose SQLite feedback store fails for real —
its folder taken away (SQLite cannot open the file: learns answer 503), or the file held
to its size (SQLite's own "database or disk is full": 507) — and comes back."""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer, MetricSamples
from tagalign.feedback import Decision, FeedbackStore, sqlite_url
from tagalign.project import Project, ServingSettings
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.serve.tokens import TokenStore
from tiny_models import tiny_records, tiny_vocab

API = "/tagalign/v1"
HEALTH, LIVE, READY = f"{API}/health", f"{API}/health/live", f"{API}/health/ready"
PILZE = "4046076-9"


def learn(url: str, rid: str, project: str = "toy") -> httpx.Response:
    return httpx.post(f"{url}{API}/projects/{project}/learn", timeout=30, json={"records": [
        {"id": rid, "title": "Pilze im Holz " * 40, "subjects": [PILZE]}]})


def when(iso: str | None) -> float:
    assert iso is not None
    return _dt.datetime.fromisoformat(iso).timestamp()


class AwayStore:
    """A served SQLite store whose folder can be taken away and given back: with its
    pooled connections closed, SQLite cannot open the file (SQLITE_CANTOPEN); held to its
    current size it is full (SQLITE_FULL)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir()
        self.store = FeedbackStore(sqlite_url(folder / "feedback.sqlite"))
        self.pages = 0

        @event.listens_for(self.store.engine, "connect")
        def _limit(dbapi_conn, _record):
            if self.pages:
                dbapi_conn.execute(f"PRAGMA max_page_count={self.pages}")

    def away(self) -> None:
        self.store.engine.dispose()
        self.folder.rename(self.folder.with_name("away"))

    def back(self) -> None:
        self.folder.with_name("away").rename(self.folder)

    def full(self) -> None:
        with self.store.engine.connect() as conn:
            self.pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        self.store.engine.dispose()

    def roomy(self) -> None:
        self.pages = 0
        self.store.engine.dispose()


def trained_toy(root: Path, name: str) -> Project:
    """The toy project trained in ``root/name``, served learning."""
    Project.create(root / name, tiny_vocab(), "test-overlap").train(tiny_records(40))
    return Project.load(root / name, serving=ServingSettings(allow_learn=True))


@pytest.fixture()
def served(tmp_path):
    away = AwayStore(tmp_path / "fb")
    app = create_app({"toy": trained_toy(tmp_path, "toy")}, away.store)
    with LiveServer(app) as live:
        live.away, live.app = away, app
        yield live


def test_health_ok_degraded_while_the_store_is_away_and_ok_once_it_is_back(served):
    url, away = served.url, served.away
    started = time.time()
    assert learn(url, "before").status_code == 200
    body = httpx.get(url + HEALTH).json()
    check = body["checks"]["toy"]
    assert (body["status"], body["projects"], check["status"]) == ("ok", 1, "ok")
    model = check["model"]
    assert (model["status"], model["trained"]) == ("ok", True)
    assert len(model["version"]) == 12 and model["trained_at"] and model["loaded_at"]
    store = check["feedback_store"]
    assert (store["status"], store["since"]) == ("ok", None)
    assert started - 1 <= when(store["last_reachable"]) <= time.time() + 1

    away.away()
    failed = learn(url, "away")
    assert failed.status_code == 503 and failed.headers["retry-after"]
    answers = [httpx.get(url + p) for p in (HEALTH, LIVE, READY)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    body, live, ready = (a.json() for a in answers)
    check = body["checks"]["toy"]
    assert (body["status"], check["status"], check["model"]["status"]) == (
        "degraded", "degraded", "ok")
    assert check["feedback_store"]["status"] == "unavailable"
    assert started - 1 <= when(check["feedback_store"]["since"]) <= time.time() + 1
    assert check["feedback_store"]["last_reachable"] == store["last_reachable"]
    assert live == {"status": "ok"}
    assert ready == {"status": "ready", "reason": None, "suggest": {"toy": True}}
    info = httpx.get(f"{url}{API}/projects/toy").json()
    assert info["learning"]["state"] == "paused" and info["learning"]["reason"] == "unavailable"
    res = httpx.post(f"{url}{API}/projects/toy/suggest", json={"title": "Pilze"})
    assert res.status_code == 200 and res.json()["results"][0]["id"] == PILZE

    away.back()
    assert learn(url, "back").status_code == 200
    body = httpx.get(url + HEALTH).json()
    assert body["status"] == "ok" and body["checks"]["toy"]["feedback_store"]["since"] is None
    assert httpx.get(f"{url}{API}/projects/toy").json()["learning"] == {
        "state": "on", "reason": None, "since": None}

    away.full()
    failed = learn(url, "full")
    for i in range(40):  # until the file would need another page
        if failed.status_code != 200:
            break
        failed = learn(url, f"full-{i}")
    assert failed.status_code == 507
    body = httpx.get(url + HEALTH).json()
    assert (body["status"], body["checks"]["toy"]["feedback_store"]["status"]) == (
        "degraded", "no_space")
    assert httpx.get(f"{url}{API}/projects/toy").json()["learning"]["reason"] == "no_space"
    away.roomy()
    assert learn(url, "roomy").status_code == 200
    assert httpx.get(url + HEALTH).json()["status"] == "ok"


def test_store_gauges_are_current_at_each_scrape(served):
    """up 0 while the store is away, 1 once a write went through again — here the test's
    own, not a learn request: the values are read when ``/metrics`` answers."""
    url, away = served.url, served.away

    def scrape() -> MetricSamples:
        return MetricSamples(httpx.get(url + "/metrics").text)

    assert learn(url, "before").status_code == 200
    first = scrape()
    assert first("tagalign_feedback_store_up", project="toy") == 1
    reached = first("tagalign_feedback_store_last_reachable_timestamp_seconds", project="toy")
    assert time.time() - 60 < reached <= time.time()
    assert "# TYPE tagalign_feedback_store_up gauge" in first.text

    away.away()
    assert learn(url, "away").status_code == 503
    down = scrape()
    assert down("tagalign_feedback_store_up", project="toy") == 0
    assert down("tagalign_feedback_store_last_reachable_timestamp_seconds",
                project="toy") == reached  # nothing ran on it since

    away.back()
    time.sleep(0.01)
    away.store.add("toy", [Decision(Record(id="direct", title="Pilze"), [PILZE])])
    back = scrape()
    assert back("tagalign_feedback_store_up", project="toy") == 1
    assert back("tagalign_feedback_store_last_reachable_timestamp_seconds",
                project="toy") > reached


def test_not_ready_while_stopping_and_when_no_project_can_suggest(tmp_path, served):
    served.app.state.stopping.set()
    res = httpx.get(served.url + READY)
    assert res.status_code == 503 and res.json()["status"] == "not_ready"
    assert "stopping" in res.json()["reason"]
    assert httpx.get(served.url + LIVE).status_code == 200
    served.app.state.stopping.clear()
    assert httpx.get(served.url + READY).status_code == 200

    later = Project.create(tmp_path / "later", tiny_vocab(), "test-overlap")
    store = FeedbackStore.for_project(tmp_path / "later")
    with LiveServer(create_app({"later": later}, store)) as alone:
        res = httpx.get(alone.url + READY)
        assert res.status_code == 503
        assert res.json() == {"status": "not_ready", "suggest": {"later": False},
                              "reason": "no project can suggest: 'later' is not trained"}
        body = httpx.get(alone.url + HEALTH).json()
        assert body["status"] == "degraded"
        assert body["checks"]["later"]["model"] == {
            "status": "not_trained", "trained": False, "version": None, "trained_at": None,
            "loaded_at": None}
        assert body["checks"]["later"]["feedback_store"]["status"] == "ok"

    # beside a trained one: ready (it can suggest), degraded (one project cannot)
    both = {"toy": trained_toy(tmp_path, "toy2"), "later": later}
    with LiveServer(create_app(both, FeedbackStore.for_project(tmp_path / "toy2"))) as mixed:
        res = httpx.get(mixed.url + READY)
        assert res.status_code == 200
        assert res.json()["suggest"] == {"toy": True, "later": False}
        body = httpx.get(mixed.url + HEALTH).json()
        assert body["status"] == "degraded"
        assert [body["checks"][p]["status"] for p in ("toy", "later")] == ["ok", "degraded"]


def test_learning_is_off_for_projects_that_do_not_learn(tmp_path, tiny_hybrid):
    trained_toy(tmp_path, "toy")
    projects = {"closed": Project.load(tmp_path / "toy"),
                "mapped": Project.load(tiny_hybrid, mmap=True,
                                       serving=ServingSettings(allow_learn=True))}
    store = FeedbackStore(sqlite_url(tmp_path / "feedback.sqlite"))
    with LiveServer(create_app(projects, store)) as live:
        listed = httpx.get(f"{live.url}{API}/projects").json()["projects"]
        assert {p["id"]: p["learning"] for p in listed} == {
            "closed": {"state": "off", "reason": "allow_learn", "since": None},
            "mapped": {"state": "off", "reason": "read_only", "since": None}}
        assert httpx.get(live.url + HEALTH).json()["status"] == "ok"  # off is not degraded


def test_health_routes_need_no_token_but_the_host_check_holds(tmp_path):
    tokens = TokenStore(tmp_path / "tokens.toml")
    tokens.add("someone")
    app = create_app({"toy": trained_toy(tmp_path, "toy")}, FeedbackStore.for_project(
        tmp_path / "toy"), tokens=TokenStore.read(tokens.path))
    with LiveServer(app) as live:
        for path in (HEALTH, LIVE, READY):
            assert httpx.get(live.url + path).status_code == 200, path
            res = httpx.get(live.url + path, headers={"Host": "evil.example"})
            assert res.status_code == 421 and "--allowed-host" in res.json()["detail"]
        doc = httpx.get(f"{live.url}/openapi.json").json()
    for path in (HEALTH, LIVE, READY):
        op = doc["paths"][path]["get"]
        assert "security" not in op and "404" not in op["responses"], path
    ready = doc["paths"][READY]["get"]["responses"]
    assert {ready[s]["content"]["application/json"]["schema"]["$ref"]
            for s in ("200", "503")} == {"#/components/schemas/ReadyOut"}
    assert doc["paths"][HEALTH]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"]["$ref"] == "#/components/schemas/HealthOut"
    learning = doc["components"]["schemas"]["ProjectOut"]["properties"]["learning"]
    assert learning["$ref"] == "#/components/schemas/LearningOut"
