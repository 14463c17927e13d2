"""Who may reach the server from a browser, and requests that must not stall or break it
(`tagalign.serve.guard`; real server on localhost, real HTTP clients)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer, toy_app
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.serve.queue import RecordQueue
from tagalign.text.language import MAX_TEXT, detect_language
from tiny_models import tiny_records, tiny_vocab

API = "/tagalign/v1"
PILZE = "4046076-9"
LISTED = "https://catalogue.example.org"
LEARN_V1 = [{"text": "Pilze\nfungi mushroom", "subjects": [{"uri": f"gnd:{PILZE}"}]}]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard")
    with LiveServer(toy_app(root, max_body=20_000_000)) as srv:
        srv.db = root / "toy"
        yield srv


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """The toy project served with an allow-listed origin and one more host name."""
    root = tmp_path_factory.mktemp("guarded")
    toy_app(root)  # trains the project
    project = Project.load(root / "toy", serving=ServingSettings(allow_learn=True))
    app = create_app({"toy": project}, FeedbackStore.for_project(root / "toy"),
                     allowed_hosts=["tagger.example.org"], cors_origins=[LISTED])
    with LiveServer(app) as srv:
        yield srv


def _stored(folder: Path) -> int:
    store = FeedbackStore.for_project(folder)
    try:
        return store.count("toy")
    finally:
        store.close()


# -- item 1: nobody in --------------------------------------------------------------------
def test_cross_site_simple_posts_to_learn_are_refused_415(live):
    before = _stored(live.db)
    sneaky = {"Content-Type": "text/plain;x=json", "Origin": "https://evil.example"}
    res = httpx.post(f"{live.url}/v1/projects/toy/learn", content=json.dumps(LEARN_V1),
                     headers=sneaky)
    assert res.status_code == 415, res.text
    assert res.headers["content-type"] == "application/problem+json"
    assert res.json()["status"] == 415 and "application/json" in res.json()["detail"]
    own = {"records": [{"id": "x1", "title": "Pilze", "subjects": [PILZE]}]}
    for kind in ("text/plain;x=json", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": kind} if kind else {}
        res = httpx.post(f"{live.url}{API}/projects/toy/learn", content=json.dumps(own),
                         headers=headers)
        assert res.status_code == 415, (kind, res.text)
        assert res.headers["content-type"] == "application/json"
        assert "application/json" in res.json()["detail"]
    assert _stored(live.db) == before  # nothing was written
    # JSON bodies still work, and so does Annif's form suggest
    assert httpx.post(f"{live.url}/v1/projects/toy/learn", json=LEARN_V1).status_code == 204
    assert httpx.post(f"{live.url}/v1/projects/toy/suggest",
                      data={"text": "Pilze"}).status_code == 200


def test_cors_any_origin_may_get_only_listed_origins_may_post(live, guarded):
    other = {"Origin": "https://evil.example"}
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}
    for base in (live.url, guarded.url):
        got = httpx.get(f"{base}/v1/projects", headers=other)
        assert got.headers["access-control-allow-origin"] == "*"  # as Annif
        for path in ("/v1/projects/toy/learn", f"{API}/projects/toy/learn"):
            pre = httpx.options(f"{base}{path}", headers={**other, **preflight})
            assert "POST" not in pre.headers.get("access-control-allow-methods", ""), path
            assert pre.status_code >= 400, path
        own = httpx.get(f"{base}{API}/projects", headers=other)
        assert "access-control-allow-origin" not in own.headers
    # an allow-listed origin may POST JSON to both APIs
    for path in ("/v1/projects/toy/learn", f"{API}/projects/toy/suggest"):
        pre = httpx.options(f"{guarded.url}{path}", headers={"Origin": LISTED, **preflight})
        assert pre.status_code == 200, path
        assert pre.headers["access-control-allow-origin"] == LISTED
        assert "POST" in pre.headers["access-control-allow-methods"]
    res = httpx.post(f"{guarded.url}{API}/projects/toy/suggest", json={"title": "Pilze"},
                     headers={"Origin": LISTED})
    assert res.status_code == 200 and res.headers["access-control-allow-origin"] == LISTED


def test_host_header_must_name_this_server(live, guarded):
    port = live.port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.2", f"tagger.example.org:{port}"):
        res = httpx.get(f"{live.url}/v1/projects", headers={"Host": host})
        assert res.status_code == 421, host
        assert res.headers["content-type"] == "application/problem+json"
        own = httpx.get(f"{live.url}{API}/health", headers={"Host": host})
        assert own.status_code == 421 and "--allowed-host" in own.json()["detail"]
        learn = httpx.post(f"{live.url}/v1/projects/toy/learn", json=LEARN_V1,
                           headers={"Host": host})
        assert learn.status_code == 421
    for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}",
                 "LOCALHOST"):
        assert httpx.get(f"{live.url}/v1/projects", headers={"Host": host}).status_code == 200
    extra = f"tagger.example.org:{guarded.port}"
    assert httpx.get(f"{guarded.url}{API}/health", headers={"Host": extra}).status_code == 200


# -- item 2: detect-language off the loop, cut, and no lock shared with suggest -------------
def test_detect_language_reads_only_the_head_of_a_text():
    german = "Die Pilze wachsen im feuchten Holz der alten Häuser. " * (MAX_TEXT // 50)
    english = "The fungi grow in the damp wood of the old houses. " * (MAX_TEXT // 10)
    ranked = dict(detect_language(german + english, ["de", "en"]))
    assert ranked["de"] > ranked["en"]  # the English tail (5× longer) is never read


def test_detect_language_runs_off_the_loop_without_a_lock_suggest_needs(live, monkeypatch):
    """A detection held back (here: blocked on purpose, standing for the seconds simplemma
    took on 20 MB) stalls nobody: health and a suggest without a language, which detects
    the language too, are answered while it is still held. Deterministic: no timing."""
    import tagalign.text.language as language

    entered, release = threading.Event(), threading.Event()
    real_head = language._head

    def held_head(text: str, limit: int = language.MAX_TEXT) -> str:
        if text.startswith("HOLD"):
            entered.set()
            release.wait(60)
        return real_head(text, limit)

    monkeypatch.setattr(language, "_head", held_head)
    big: dict = {}

    def detect():
        big["res"] = httpx.post(f"{live.url}/v1/detect-language", timeout=120,
                                json={"text": "HOLD Pilze im Holz", "languages": ["de", "en"]})

    worker = threading.Thread(target=detect)
    worker.start()
    try:
        assert entered.wait(60)
        with httpx.Client(timeout=30) as client:
            client.get(f"{live.url}{API}/health").raise_for_status()
            client.post(f"{live.url}{API}/projects/toy/suggest",
                        json={"title": "Pilze im Holz"}).raise_for_status()
        assert not release.is_set()  # both answered while the detection was held
    finally:
        release.set()
        worker.join()
    assert big["res"].status_code == 200, big["res"].text
    assert big["res"].json()["results"][0]["language"] == "de"


# -- item 3: smaller ----------------------------------------------------------------------
def test_deeply_nested_json_is_a_client_error_on_both_apis(live):
    deep = "[" * 100_000
    for path in ("/v1/projects/toy/learn", "/v1/projects/toy/suggest-batch",
                 "/v1/detect-language"):
        res = httpx.post(f"{live.url}{path}", content=deep,
                         headers={"Content-Type": "application/json"})
        assert res.status_code == 400, (path, res.text[:200])
        assert res.headers["content-type"] == "application/problem+json"
        assert res.json()["status"] == 400
    for path in ("/projects/toy/learn", "/projects/toy/suggest", "/projects/toy/suggest-batch"):
        res = httpx.post(f"{live.url}{API}{path}", content=deep,
                         headers={"Content-Type": "application/json"})
        assert res.status_code in (400, 422), (path, res.text[:200])
    assert httpx.get(f"{live.url}{API}/health").status_code == 200


def test_503_names_the_project_not_its_folder(tmp_path: Path):
    folder = tmp_path / "secret-place" / "gnd"
    project = Project.create(folder, tiny_vocab(), "test-overlap", {})
    app = create_app({"gnd": project}, FeedbackStore.for_project(folder))
    with LiveServer(app) as srv:
        answers = [httpx.post(f"{srv.url}/v1/projects/gnd/suggest", data={"text": "Pilze"}),
                   httpx.post(f"{srv.url}/v1/projects/gnd/suggest-batch",
                              json={"documents": [{"text": "Pilze"}]}),
                   httpx.post(f"{srv.url}{API}/projects/gnd/suggest", json={"title": "Pilze"}),
                   httpx.post(f"{srv.url}{API}/projects/gnd/suggest-batch",
                              json={"records": [{"title": "Pilze"}]})]
    for res in answers:
        assert res.status_code == 503, res.text
        assert "secret-place" not in res.text and str(tmp_path) not in res.text, res.text
    assert all("'gnd'" in res.text for res in answers)


QUEUE = [Record(id=f"q{i}", title=f"Pilze {i}", abstract="fungi", language="de")
         for i in range(5)]


def test_appended_queue_records_keep_the_progress_of_finished_ones(tmp_path: Path):
    project = Project.create(tmp_path / "toy", tiny_vocab(), "test-overlap", {})
    project.train(tiny_records(40))

    def serve(records):
        store = FeedbackStore.for_project(tmp_path / "toy")
        return LiveServer(create_app({"toy": project}, store,
                                     review=RecordQueue(records, name="new.jsonl.gz")))

    with serve(QUEUE[:3]) as srv:
        base = f"{srv.url}{API}/projects/toy/queue"
        refused = httpx.post(f"{base}/0/finish")  # bodiless, no JSON type: a simple request
        assert refused.status_code == 415
        assert httpx.get(base).json()["finished"] == 0
        for i in (0, 1):
            assert httpx.post(f"{base}/{i}/finish", json={}).status_code == 200
        assert httpx.post(f"{base}/2/finish",
                          headers={"Content-Type": "application/json"}).status_code == 200
        assert httpx.get(base).json() | {"name": None} == {
            "name": None, "size": 3, "finished": 3, "position": None, "release_above": None,
            "estimated": False, "skipped": 0}
    # two records appended to the file: the three finished stay finished
    with serve([*QUEUE[:3], *QUEUE[3:]]) as srv:
        status = httpx.get(f"{srv.url}{API}/projects/toy/queue").json()
        assert (status["size"], status["finished"], status["position"]) == (5, 3, 3)


def test_allowed_hosts_come_from_the_environment_too(tmp_path, monkeypatch):
    """TAGALIGN_ALLOWED_HOSTS (names separated by spaces) is --allowed-host for a
    container: a Host it names is answered, another gets 421."""
    from typer.testing import CliRunner

    from tagalign.cli import app as cli
    from tagalign.serve import server

    Project.create(tmp_path / "toy", tiny_vocab(), "test-overlap").train(tiny_records(20))
    built = []
    monkeypatch.setattr(server, "run_server", lambda app_, *a: built.append(app_))
    monkeypatch.setenv("TAGALIGN_ALLOWED_HOSTS", "tags.example.org  other.example.org")
    res = CliRunner().invoke(cli, ["serve", str(tmp_path / "toy"), "--no-metrics"])
    assert res.exit_code == 0, res.output
    with LiveServer(built[0]) as srv:
        for host, status in (("tags.example.org", 200), ("other.example.org", 200),
                             ("evil.example.org", 421)):
            assert httpx.get(f"{srv.url}/v1/", headers={"Host": host}).status_code == status
