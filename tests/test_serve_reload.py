"""A model swapped in while `tagalign serve` runs (a real server in a subprocess, tiny
hybrids): the folder replaced as `tagalign download --force` does (`shipping.swap`), then
``POST …/reload`` or SIGHUP. The old model serves until the new one is in; a broken model is
refused and the old one keeps answering the same; requests running meanwhile succeed, each
answered by one model whole; learned records survive the swap; SIGTERM lets a request in
flight finish and exits 0."""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from serving import HeldRequest, ServeProcess, refused
from tagalign.project import Project, Tagger, model_version
from tagalign.records import Record
from tagalign.shipping.swap import incoming, replace
from tagalign.suggest import SuggestRequest
from tiny_models import ZEPPELINS

API = "/tagalign/v1/projects/tiny"
T = 60  # seconds a test waits for an answer (a loaded machine is slow)
#: the two tiny hybrids answer it differently: only the second knows zeppelins
QUERY = {"title": "Zeppeline und Pilze", "abstract": f"{ZEPPELINS} mushroom rot decay",
         "limit": 5}
LEARNED = {"id": "learned-1", "title": "Pilze der Zukunft",
           "abstract": "mushroom fungi forecast scenario", "subjects": ["4068097-6"]}


def answers(folder: Path) -> list[tuple[str, float]]:
    """What the model in ``folder`` suggests for `QUERY`, computed here."""
    rec = Record(id="q", title=QUERY["title"], abstract=QUERY["abstract"])
    tagged = Tagger(Project.load(folder)).tag([rec], SuggestRequest(limit=QUERY["limit"]))[0]
    return [(s.id, round(float(s.score), 6)) for s in tagged.suggestions]


def served(url: str) -> tuple[list[tuple[str, float]], str]:
    res = httpx.post(f"{url}{API}/suggest", json=QUERY, timeout=T)
    assert res.status_code == 200, res.text
    return ([(r["id"], r["score"]) for r in res.json()["results"]],
            res.headers["x-model-version"])


def swap_in(model: Path, target: Path, break_it: bool = False) -> None:
    """``model``'s folder replaces ``target`` the way `tagalign download --force` does
    (the feedback store carried over); ``break_it``: its ranker file is garbage."""
    shutil.copytree(model, incoming(target))
    if break_it:
        ranker = next((incoming(target) / "model" / "ranker").glob("*.json"))
        ranker.write_text("not json", encoding="utf-8")
    replace(target)


def reload(url: str, project: str = "tiny") -> httpx.Response:
    # a POST without a body declares JSON all the same (`tagalign.serve.guard`)
    return httpx.post(f"{url}/tagalign/v1/projects/{project}/reload", timeout=120,
                      headers={"Content-Type": "application/json"})


def version(url: str) -> str:
    return httpx.get(f"{url}{API}", timeout=T).json()["model_version"]["version"]


@contextlib.contextmanager
def clients(url: str, n: int = 4, deadline: float = 180):
    """``n`` clients suggesting `QUERY` in a loop, each on its kept-alive connection: the
    block starts once every one has been answered and, when it ends, waits until each has
    been answered 3 more times, then stops them. Yields per client its
    (status, X-Model-Version, results) rows."""
    seen: list[list[tuple[int, str | None, list]]] = [[] for _ in range(n)]
    stop = threading.Event()

    def client(log: list) -> None:
        with httpx.Client(base_url=url, timeout=T) as http:
            while not stop.is_set():
                res = http.post(f"{API}/suggest", json=QUERY)
                log.append((res.status_code, res.headers.get("x-model-version"),
                            [(r["id"], r["score"]) for r in res.json()["results"]]))

    threads = [threading.Thread(target=client, args=(log,)) for log in seen]
    for t in threads:
        t.start()
    try:
        end = time.time() + deadline
        while not all(seen):
            assert time.time() < end
            time.sleep(0.05)
        yield seen
        marks = [len(log) for log in seen]
        while any(len(log) < m + 3 for log, m in zip(seen, marks, strict=True)):
            assert time.time() < end
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(60)


@pytest.fixture(scope="module")
def server(tiny_hybrids, tmp_path_factory):
    a, b = tiny_hybrids
    root = tmp_path_factory.mktemp("reload")
    shutil.copytree(a, root / "tiny")
    srv = ServeProcess(str(root / "tiny"), "--allow-learn", "--no-compile-ranker",
                       log=root / "log")
    srv.wait_ready("tiny")
    yield srv, root / "tiny", {model_version(a)["version"]: answers(a),
                               model_version(b)["version"]: answers(b)}
    srv.stop()


def test_reload_serves_the_new_model_and_refuses_a_broken_one(server, tiny_hybrids):
    srv, folder, expected = server
    a, b = tiny_hybrids
    va, vb = model_version(a), model_version(b)
    assert expected[va["version"]] != expected[vb["version"]]  # the two models tell apart
    if version(srv.url) != va["version"]:
        swap_in(a, folder)
        assert reload(srv.url).json()["status"] == "reloaded"
    assert served(srv.url) == (expected[va["version"]], va["version"])
    shown = httpx.get(f"{srv.url}{API}", timeout=T).json()
    assert shown["model_version"] == dict(va)
    assert [w["version"] for w in shown["workers"]] == [va["version"]]
    assert shown["worker"] == shown["workers"][0]["pid"] == srv.proc.pid

    swap_in(b, folder, break_it=True)  # on disk now, not served: the old model answers
    assert served(srv.url) == (expected[va["version"]], va["version"])
    res = reload(srv.url)
    assert res.status_code == 409
    detail = res.json()["detail"]
    assert detail.startswith("project 'tiny': the model in its folder was not loaded "
                             "(JSONDecodeError: ")
    assert detail.endswith(f"the model loaded before (version {va['version']}) keeps serving")
    assert str(folder) not in detail
    assert served(srv.url) == (expected[va["version"]], va["version"])
    assert httpx.get(f"{srv.url}{API}", timeout=T).json()["model_version"] == dict(va)
    assert "reload refused" in srv.log()

    swap_in(b, folder)
    res = reload(srv.url)
    assert res.status_code == 200, res.text
    body = res.json()
    assert (body["status"], body["model_version"], body["previous_version"]) == (
        "reloaded", dict(vb), dict(va))
    assert body["worker"] == srv.proc.pid and body["others_asked"] is False
    assert served(srv.url) == (expected[vb["version"]], vb["version"])
    again = reload(srv.url).json()
    assert (again["status"], again["model_version"]) == ("unchanged", dict(vb))
    assert reload(srv.url, "nope").status_code == 404


def test_sighup_reloads_while_requests_run(server, tiny_hybrids):
    srv, folder, expected = server
    old = version(srv.url)
    new = next(m for m in tiny_hybrids if model_version(m)["version"] != old)
    swap_in(new, folder)
    with clients(srv.url) as seen:
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 120
        while version(srv.url) == old:
            assert time.time() < deadline, srv.log()
            time.sleep(0.1)
    rows = [row for log in seen for row in log]
    assert {status for status, _, _ in rows} == {200}
    # each answer is one model's, whole: the one its header names
    assert all(results == expected[v] for _, v, results in rows)
    assert {v for _, v, _ in rows} == {old, model_version(new)["version"]}
    assert all(log[-1][1] == model_version(new)["version"] for log in seen)


def test_learned_records_survive_a_reload(server, tiny_hybrids):
    srv, folder, _ = server
    res = httpx.post(f"{srv.url}{API}/learn", json={"records": [LEARNED]}, timeout=T)
    assert res.json() == {"stored": 1, "learned": True}

    def neighbours() -> list[str]:
        body = {"title": LEARNED["title"], "abstract": LEARNED["abstract"], "limit": 8}
        rows = httpx.post(f"{srv.url}{API}/suggest", json=body, timeout=T).json()["results"]
        return [n["id"] for r in rows if r["id"] == "4068097-6"
                for n in r["reasons"].get("neighbours", [])]

    assert "learned-1" in neighbours()
    old = version(srv.url)
    swap_in(next(m for m in tiny_hybrids if model_version(m)["version"] != old), folder)
    res = reload(srv.url).json()
    assert res["status"] == "reloaded" and res["learned"] >= 1
    assert "learned-1" in neighbours()


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(tiny_hybrids, tmp_path):
    a, _ = tiny_hybrids
    shutil.copytree(a, tmp_path / "tiny")
    srv = ServeProcess(str(tmp_path / "tiny"), "--no-compile-ranker", log=tmp_path / "log")
    try:
        srv.wait_ready("tiny")
        held = HeldRequest(srv.port, f"{API}/suggest", QUERY)
        srv.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 60
        while not refused(srv.port):  # stops accepting, the request still open
            assert time.time() < deadline, srv.log()
            time.sleep(0.05)
        status, headers, body = held.finish()
        assert status == 200 and headers["x-model-version"] == model_version(a)["version"]
        assert [(r["id"], r["score"]) for r in httpx.Response(200, content=body)
                .json()["results"]] == answers(a)
        assert srv.proc.wait(60) == 0, srv.log()
        assert "Traceback" not in srv.log()
    finally:
        srv.stop()


def test_model_version_tells_every_save_apart(tmp_path):
    """The version a reload compares: a new save (even of the same model, in the same
    second) is a new version; an untouched folder keeps its version; no model, none."""
    import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
    from tiny_models import tiny_records, tiny_vocab

    project = Project.create(tmp_path / "p", tiny_vocab(), "test-overlap")
    assert model_version(project) == {"version": None, "trained_at": None}
    assert project.model_version is None
    project.train(tiny_records(10))
    first = model_version(project)
    assert project.model_version == first == model_version(tmp_path / "p")
    assert len(first["version"]) == 12 and first["trained_at"]
    project.save_model(project.recipe)  # the same model again, within the same second
    assert model_version(project)["version"] != first["version"]
    assert Project.load(tmp_path / "p").model_version == model_version(project)


def test_concurrent_reloads_of_one_project_load_it_once(tmp_path, monkeypatch):
    """Two reloads at once (two clients, a SIGHUP beside a POST): one loads the new model,
    the other waits for it and finds nothing left to do. The first load is held until the
    second reload has begun, so without the wait both would load."""
    from concurrent.futures import ThreadPoolExecutor

    import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
    from serving import LiveServer
    from tagalign.feedback import FeedbackStore
    from tagalign.serve.app import create_app
    from tagalign.serve.reload import LiveProjects
    from tiny_models import tiny_records, tiny_vocab

    project = Project.create(tmp_path / "toy", tiny_vocab(), "test-overlap")
    project.train(tiny_records(20))
    app = create_app({"toy": Project.load(tmp_path / "toy")},
                     FeedbackStore.for_project(tmp_path / "toy"))
    calls, second = [], threading.Event()
    load, reload_ = Project.load.__func__, LiveProjects.reload

    def counted_reload(self, project_id):
        calls.append(project_id)
        if len(calls) == 2:
            second.set()
        return reload_(self, project_id)

    def held_load(cls, *args, **kwargs):
        assert second.wait(60)
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(LiveProjects, "reload", counted_reload)
    monkeypatch.setattr(Project, "load", classmethod(held_load))
    with LiveServer(app) as live:
        project.train(tiny_records(30, seed=3))  # a new model in the folder
        with ThreadPoolExecutor(2) as pool:
            done = [r.json() for r in pool.map(lambda _: reload(live.url, "toy"), range(2))]
    assert sorted(d["status"] for d in done) == ["reloaded", "unchanged"]
    assert {d["model_version"]["version"] for d in done} == {model_version(project)["version"]}


def test_annif_answers_name_the_model_version_too(server):
    """Annif's /v1 suggest and suggest-batch carry X-Model-Version as tagalign's API does
    (a header: the bodies stay Annif's)."""
    srv, _, _ = server
    current = version(srv.url)
    one = httpx.post(f"{srv.url}/v1/projects/tiny/suggest", data={"text": QUERY["title"]},
                     timeout=T)
    batch = httpx.post(f"{srv.url}/v1/projects/tiny/suggest-batch",
                       json={"documents": [{"text": QUERY["title"]}]}, timeout=T)
    assert one.status_code == batch.status_code == 200
    assert one.headers["x-model-version"] == batch.headers["x-model-version"] == current
    assert set(one.json()) == {"results"}
