"""API tokens (issue 31): the tokens file and `tagalign tokens`, and a real server on
localhost that answers a write 401 without a token, 403 with an unknown one and 200 with a
good one, on both APIs (toy project, no data)."""

from __future__ import annotations

import hmac
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import requests
from annif_client import AnnifClient
from fastapi.routing import iter_route_contexts
from typer.testing import CliRunner

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer, free_port, logged
from tagalign.cli import app as cli
from tagalign.cli.tokens_cmd import serving_tokens
from tagalign.errors import NotFoundError
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings
from tagalign.projects_file import ProjectsFileError, read_projects, read_server_keys
from tagalign.serve.app import create_app
from tagalign.serve.queue import RecordQueue
from tagalign.serve.tokens import (
    HEADER,
    TOKENS_ENV,
    TokensFileError,
    TokenStore,
    token_hash,
)
from test_subject_queue import QUEUE
from tiny_models import tiny_records, tiny_vocab

API = "/tagalign/v1"
PILZE = "4046076-9"
GND = "https://d-nb.info/gnd/"
LEARN_OWN = {"records": [{"id": "tok-1", "title": "Pilze", "abstract": "fungi",
                          "subjects": [PILZE]}]}
LEARN_V1 = [{"text": "Pilze\nfungi mushroom", "subjects": [{"uri": GND + PILZE}]}]
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tokens")
    Project.create(root / "toy", tiny_vocab(), "test-overlap", {}).train(tiny_records(40))
    return root


def _server(root: Path, tokens: TokenStore | None, *, allow_learn: bool = True,
            require: bool = False) -> LiveServer:
    project = Project.load(root / "toy", serving=ServingSettings(allow_learn=allow_learn))
    app = create_app({"toy": project}, FeedbackStore.for_project(root / "toy"),
                     review=RecordQueue(QUEUE[:3]), tokens=tokens,
                     require_token_for_suggest=require)
    srv = LiveServer(app)
    srv.app = app
    return srv


@pytest.fixture(scope="module")
def live(trained):
    store = TokenStore(trained / "tokens.toml")
    token = store.add("librarian")
    with _server(trained, TokenStore.read(store.path)) as srv:
        srv.token = token
        srv.file = store.path
        srv.db = trained / "toy" / "feedback.sqlite"
        yield srv


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("select count(*) from decisions").fetchone()[0]


# -- the tokens file and the CLI -------------------------------------------------------
def test_tokens_add_list_remove(tmp_path):
    file = tmp_path / "secrets" / "tokens.toml"
    res = runner.invoke(cli, ["tokens", "add", "alice", "--file", str(file)])
    assert res.exit_code == 0, res.output
    alice = res.stdout.strip()
    assert re.fullmatch(r"tga_[A-Za-z0-9_-]{43}", alice)  # alone on stdout
    assert "Authorization: Bearer" in res.stderr and alice not in res.stderr
    text = file.read_text("utf-8")
    assert alice not in text and alice[4:] not in text and token_hash(alice) in text
    assert file.stat().st_mode & 0o777 == 0o600

    # the environment variable serve reads names the file too
    res = runner.invoke(cli, ["tokens", "add", "bob"], env={TOKENS_ENV: str(file)})
    bob = res.stdout.strip()
    assert res.exit_code == 0 and bob != alice
    res = runner.invoke(cli, ["tokens", "add", "alice", "--file", str(file)])
    assert res.exit_code == 1 and "a token named 'alice' exists" in res.stderr
    assert res.stdout == ""

    listed = runner.invoke(cli, ["tokens", "list", "--file", str(file)])
    assert listed.exit_code == 0
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["alice", "bob"]
    assert re.search(r"\t\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$", listed.stdout.splitlines()[0])
    assert "sha256" not in listed.output and alice not in listed.output
    assert not any(token_hash(t)[7:] in listed.output for t in (alice, bob))

    assert runner.invoke(cli, ["tokens", "remove", "alice", "--file", str(file)]).exit_code == 0
    store = TokenStore.read(file)
    assert [e.name for e in store.entries] == ["bob"]
    assert store.verify(alice) is None and store.verify(bob) == "bob"
    res = runner.invoke(cli, ["tokens", "remove", "nobody", "--file", str(file)])
    assert res.exit_code == 1 and "no token named 'nobody'; known: bob" in res.stderr
    res = runner.invoke(cli, ["tokens", "add", "two words", "--file", str(file)])
    assert res.exit_code == 1 and "token name 'two words'" in res.stderr
    res = runner.invoke(cli, ["tokens", "list", "--file", str(tmp_path / "none.toml")])
    assert res.exit_code == 1 and "no tokens file at" in res.stderr


@pytest.mark.parametrize("text, message", [
    ("[tokens.a\n", "not a readable TOML file"),
    ("secret = 'x'\n", "unknown key 'secret'"),
    ("[tokens.a]\nhash = 'abc'\n", "[tokens.a] hash: expected"),
    ("[tokens.a]\nhash = 'sha256:" + "0" * 64 + "'\ntoken = 'x'\n", "unknown key 'token'"),
    ("[tokens.\"a b\"]\nhash = 'sha256:" + "0" * 64 + "'\n", "not a valid token name"),
    ("[tokens.a]\nhash = 'sha256:" + "0" * 64 + "'\ncreated = 'today'\n",
     "created: expected a date"),
])
def test_a_malformed_tokens_file_is_a_clear_input_error(tmp_path, text, message):
    file = tmp_path / "tokens.toml"
    file.write_text(text, "utf-8")
    with pytest.raises(TokensFileError) as err:
        TokenStore.read(file)
    assert message in str(err.value) and str(file) in str(err.value)
    res = runner.invoke(cli, ["tokens", "list", "--file", str(file)])
    assert res.exit_code == 1 and message in res.stderr


def test_verify_compares_every_entry_in_constant_time(tmp_path, monkeypatch):
    store = TokenStore(tmp_path / "tokens.toml")
    tokens = [store.add(name) for name in ("a", "b", "c")]
    calls = []
    real = hmac.compare_digest

    def counted(x, y):
        calls.append(1)
        return real(x, y)

    monkeypatch.setattr(hmac, "compare_digest", counted)
    assert store.verify(tokens[0]) == "a" and len(calls) == 3  # no early exit on a match
    assert store.verify("tga_wrong") is None and len(calls) == 6
    assert store.verify(tokens[2]) == "c"


# -- the server ------------------------------------------------------------------------
WRITES = [  # (path, JSON body, status of a good request)
    (f"{API}/projects/toy/learn", LEARN_OWN, 200),
    ("/v1/projects/toy/learn", LEARN_V1, 204),
    (f"{API}/projects/toy/queue/0/finish", {}, 200),
]


@pytest.mark.parametrize("path, body, ok", WRITES)
def test_writes_answer_401_without_403_unknown_and_pass_a_good_token(live, path, body, ok):
    annif = path.startswith("/v1/")
    before = _rows(live.db)
    for headers in ({}, {"Authorization": f"Basic {live.token}"}, {"Authorization": "Bearer"}):
        res = httpx.post(live.url + path, json=body, headers=headers)
        assert res.status_code == 401, res.text
        assert res.headers["www-authenticate"].startswith("Bearer")
        if annif:  # Annif's problem+json
            assert res.headers["content-type"] == "application/problem+json"
            assert res.json()["status"] == 401 and res.json()["title"] == "Unauthorized"
        else:
            assert res.headers["content-type"] == "application/json"
        assert "Authorization: Bearer" in res.json()["detail"]
    res = httpx.post(live.url + path, json=body, headers=_bearer("tga_" + "x" * 43))
    assert res.status_code == 403
    assert 'error="invalid_token"' in res.headers["www-authenticate"]
    assert "unknown API token" in res.json()["detail"]
    if annif:
        assert res.json()["title"] == "Forbidden"
    assert _rows(live.db) == before  # nothing stored by a refused request
    res = httpx.post(live.url + path, json=body, headers=_bearer(live.token))
    assert res.status_code == ok, res.text
    if "learn" in path:
        assert _rows(live.db) == before + 1


def test_a_refused_body_is_neither_read_nor_validated(live):
    # bad JSON without a token: 401, not 422/400 (the check comes before the body)
    for path in (f"{API}/projects/toy/learn", "/v1/projects/toy/learn"):
        res = httpx.post(live.url + path, content=b"{not json",
                         headers={"Content-Type": "application/json"})
        assert res.status_code == 401


def test_reads_and_suggest_stay_open(live):
    for path in ("/tagalign/v1/health", f"{API}/projects", f"{API}/projects/toy",
                 f"{API}/projects/toy/queue", f"{API}/projects/toy/queue/0",
                 f"{API}/projects/toy/subjects?prefix=pil", "/v1/", "/v1/projects"):
        assert httpx.get(live.url + path).status_code == 200, path
    res = httpx.post(f"{live.url}{API}/projects/toy/suggest", json={"title": "Pilze"})
    assert res.status_code == 200 and res.json()["results"][0]["id"] == PILZE
    res = httpx.post(f"{live.url}{API}/projects/toy/suggest-batch",
                     json={"records": [{"title": "Pilze"}]})
    assert res.status_code == 200
    # the official Annif client, which sends no token: suggest, batch, detect-language
    client = AnnifClient(api_base=f"{live.url}/v1/")
    assert client.suggest("toy", "Pilze\nfungi", limit=3)[0]["uri"] == GND + PILZE
    assert client.suggest_batch("toy", [{"document_id": "1", "text": "Pilze"}])[0][
        "document_id"] == "1"
    assert client.detect_language("Pilze im Holz", ["de", "en"])["results"]
    # its learn needs the token; annif-client has no option for one, only its headers
    with pytest.raises(requests.HTTPError, match="401"):
        client.learn("toy", LEARN_V1)
    client._headers["Authorization"] = f"Bearer {live.token}"
    assert client.learn("toy", LEARN_V1).status_code == 204


def test_every_route_that_is_not_a_read_needs_a_token(live):
    """Deny by default: each route of the app with another method than GET (reload and
    anything added later included) answers 401 without a token, except the open reads."""
    open_reads = {f"{API}/projects/{{project_id}}/suggest",
                  f"{API}/projects/{{project_id}}/suggest-batch",
                  "/v1/projects/{project_id}/suggest", "/v1/projects/{project_id}/suggest-batch",
                  "/v1/detect-language"}
    checked = []
    # the routes of the included routers too (FastAPI includes them lazily)
    for route in iter_route_contexts(live.app.routes):
        if route.path is None or route.path.startswith("/static"):
            continue
        for method in (route.methods or set()) - {"GET", "HEAD"}:
            url = re.sub(r"\{(\w+)\}", lambda m: "0" if m[1] == "position" else "toy",
                         route.path)
            res = httpx.request(method, live.url + url, json={})
            assert (res.status_code == 401) == (route.path not in open_reads), (method, url)
            checked.append(route.path)
    assert {f"{API}/projects/{{project_id}}/learn", "/v1/projects/{project_id}/learn",
            f"{API}/projects/{{project_id}}/queue/{{position}}/finish"} <= set(checked)


def test_openapi_documents_the_bearer_scheme_on_protected_routes(live):
    doc = httpx.get(f"{live.url}/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": doc["components"][
            "securitySchemes"]["bearer"]["description"]}
    learn = doc["paths"][f"{API}/projects/{{project_id}}/learn"]["post"]
    finish = doc["paths"][f"{API}/projects/{{project_id}}/queue/{{position}}/finish"]["post"]
    for op in (learn, finish):
        assert op["security"] == [{"bearer": []}] and "401" in op["responses"]
    assert "Unknown API token" in learn["responses"]["403"]["description"]
    assert "allow_learn" in learn["responses"]["403"]["description"]  # kept
    assert "security" not in doc["paths"][f"{API}/projects/{{project_id}}/suggest"]["post"]
    assert "security" not in doc["paths"][f"{API}/health"]["get"]


def test_accepted_writes_log_the_name_never_the_token(live):
    with logged("tagalign.serve.auth") as seen:
        res = httpx.post(f"{live.url}{API}/projects/toy/learn", json=LEARN_OWN,
                         headers=_bearer(live.token))
        assert res.status_code == 200
    assert f"POST {API}/projects/toy/learn by token 'librarian': 200" in seen
    assert not any(live.token in line for line in seen)


def test_tokens_added_or_removed_count_from_the_next_request(trained, tmp_path):
    file = tmp_path / "tokens.toml"
    first = TokenStore(file).add("first")
    url = f"{API}/projects/toy/learn"
    with _server(trained, TokenStore.read(file)) as srv:
        assert httpx.post(srv.url + url, json=LEARN_OWN, headers=_bearer(first)).status_code \
            == 200
        res = runner.invoke(cli, ["tokens", "add", "second", "--file", str(file)])
        second = res.stdout.strip()
        assert httpx.post(srv.url + url, json=LEARN_OWN,
                          headers=_bearer(second)).status_code == 200
        assert runner.invoke(cli, ["tokens", "remove", "first", "--file", str(file)]
                             ).exit_code == 0
        assert httpx.post(srv.url + url, json=LEARN_OWN,
                          headers=_bearer(first)).status_code == 403
        # a file broken by hand keeps the tokens read before (issue 64) until it is fixed
        good = file.read_text("utf-8")
        file.write_text("[tokens\n", "utf-8")
        for token, status in ((second, 200), (first, 403)):  # removed before: still removed
            assert httpx.post(srv.url + url, json=LEARN_OWN,
                              headers=_bearer(token)).status_code == status
        file.write_text(HEADER, "utf-8")  # readable again, and valid: no tokens
        assert httpx.post(srv.url + url, json=LEARN_OWN,
                          headers=_bearer(second)).status_code == 403
        file.write_text(good, "utf-8")
        assert httpx.post(srv.url + url, json=LEARN_OWN,
                          headers=_bearer(second)).status_code == 200


BROKEN = {"not TOML": b"[tokens\n", "a bad table": b"[tokens.a]\nhash = 'abc'\n",
          "not UTF-8": b"\xff\xfe[tokens]", "deleted": None}


def test_an_unreadable_file_keeps_the_tokens_read_before_and_says_so_once(tmp_path):
    """Each way a file stops reading leaves the last good tokens in force; one line when
    it stops, one when it reads again; a file that reads always wins (it may hold none)."""
    file = tmp_path / "tokens.toml"
    first = TokenStore(file).add("first")
    second = TokenStore.read(file).add("second")
    store = TokenStore.read(file)
    good = file.read_bytes()
    with logged("tagalign.serve.tokens") as seen:
        for how, content in BROKEN.items():
            file.unlink()  # a new inode: a change even where the size stays
            if content is not None:
                file.write_bytes(content)
            for _ in range(3):
                assert (store.verify(first), store.verify(second)) == ("first", "second"), how
        assert len(seen) == 1 and seen[0].startswith(
            f"tokens file {file} unreadable, the 2 tokens read before still count until it "
            f"is fixed: {file}: not a readable TOML file"), seen
        TokenStore(file, {}).save()  # the file again, holding no token: it wins
        assert store.verify(first) is None and store.verify(second) is None
        assert seen[1:] == [f"tokens file {file} readable again: 0 tokens"]
        file.write_bytes(good)
        assert store.verify(second) == "second"
    assert seen[2:] == [f"tokens file {file} re-read: 2 tokens"]


@pytest.mark.parametrize("how", ["not TOML", "deleted"])
def test_a_worker_started_while_the_file_is_unreadable_refuses_tokens_until_it_reads(
        tmp_path, how):
    """A process built after the server started (`TokenStore.for_server`): no error that
    would stop the server; no token it cannot know is current; the file's next good
    version counts."""
    file = tmp_path / "tokens.toml"
    token = TokenStore(file).add("librarian")
    good = file.read_bytes()
    if BROKEN[how] is None:
        file.unlink()
    else:
        file.write_bytes(BROKEN[how])
    with logged("tagalign.serve.tokens") as seen:
        store = TokenStore.for_server(file)
        assert store.verify(token) is None and store.verify(token) is None
        assert len(seen) == 1 and seen[0].endswith(
            "; every token is refused by this process until the file can be read"), seen
        file.unlink(missing_ok=True)
        file.write_bytes(good)
        assert store.verify(token) == "librarian"
    assert seen[1:] == [f"tokens file {file} readable again: 1 tokens"]


def test_the_token_comes_before_allow_learn(trained, tmp_path):
    file = tmp_path / "tokens.toml"
    token = TokenStore(file).add("librarian")
    with _server(trained, TokenStore.read(file), allow_learn=False) as srv:
        own, v1 = f"{srv.url}{API}/projects/toy/learn", f"{srv.url}/v1/projects/toy/learn"
        assert httpx.post(own, json=LEARN_OWN).status_code == 401
        assert httpx.post(v1, json=LEARN_V1).status_code == 401
        res = httpx.post(own, json=LEARN_OWN, headers=_bearer(token))
        assert res.status_code == 403 and "allow_learn" in res.json()["detail"]
        res = httpx.post(v1, json=LEARN_V1, headers=_bearer(token))
        assert res.status_code == 403 and res.json()["title"] == "Learning not allowed"
        assert "www-authenticate" not in res.headers


def test_require_token_for_suggest(trained, tmp_path):
    file = tmp_path / "tokens.toml"
    token = TokenStore(file).add("reader")
    with _server(trained, TokenStore.read(file), require=True) as srv:
        own = f"{srv.url}{API}/projects/toy/suggest"
        cases = [
            (own, {"json": {"title": "Pilze"}}),
            (f"{own}-batch", {"json": {"records": [{"title": "Pilze"}]}}),
            (f"{srv.url}/v1/projects/toy/suggest", {"data": {"text": "Pilze"}}),  # a form
            (f"{srv.url}/v1/projects/toy/suggest-batch",
             {"json": {"documents": [{"text": "Pilze"}]}}),
        ]
        for url, body in cases:
            res = httpx.post(url, **body)
            assert res.status_code == 401, url
            assert httpx.post(url, **body, headers=_bearer("tga_nope")).status_code == 403
            assert httpx.post(url, **body, headers=_bearer(token)).status_code == 200, url
        with pytest.raises(requests.HTTPError, match="401"):
            AnnifClient(api_base=f"{srv.url}/v1/").suggest("toy", "Pilze")
        assert httpx.get(f"{srv.url}/v1/projects/toy").status_code == 200
        doc = httpx.get(f"{srv.url}/openapi.json").json()
        assert doc["paths"][f"{API}/projects/{{project_id}}/suggest"]["post"]["security"]


def test_require_token_for_suggest_needs_a_tokens_file(trained):
    res = runner.invoke(cli, ["serve", str(trained / "toy"), "--require-token-for-suggest"])
    assert res.exit_code == 2 and "needs --tokens-file" in res.stderr


# -- the projects file's tokens_file key -----------------------------------------------
def test_projects_file_tokens_file_key(tmp_path):
    (tmp_path / "conf").mkdir()
    projects = tmp_path / "conf" / "projects.toml"
    projects.write_text('tokens_file = "tokens.toml"\n\n[toy]\npath = "../toy"\n', "utf-8")
    assert read_server_keys(projects).tokens_file == tmp_path / "conf" / "tokens.toml"
    assert list(read_projects(projects)) == ["toy"]  # not a project
    with pytest.raises(NotFoundError, match="no tokens file at"):
        serving_tokens(None, projects)
    TokenStore(tmp_path / "conf" / "tokens.toml").add("from-file")
    TokenStore(tmp_path / "other.toml").add("from-option")
    assert [e.name for e in serving_tokens(None, projects).entries] == ["from-file"]
    assert [e.name for e in serving_tokens(tmp_path / "other.toml", projects).entries] == \
        ["from-option"]  # the option wins
    assert serving_tokens(None, None) is None
    projects.write_text('token_file = "tokens.toml"\n\n[toy]\n', "utf-8")
    with pytest.raises(ProjectsFileError, match="did you mean 'tokens_file'"):
        read_projects(projects)
    projects.write_text('tokens_file = 3\n\n[toy]\n', "utf-8")
    with pytest.raises(ProjectsFileError, match="tokens_file: expected"):
        read_server_keys(projects)
    projects.write_text('tokens_file = "t.toml"\n', "utf-8")
    with pytest.raises(ProjectsFileError, match="no projects"):
        read_projects(projects)


def test_serve_command_with_a_projects_files_tokens(trained, tmp_path):
    """`tagalign serve --projects` run as a command: its tokens_file key protects learn;
    the Annif client still suggests without a token."""
    token = TokenStore(tmp_path / "tokens.toml").add("catalogue")
    projects = tmp_path / "projects.toml"
    projects.write_text(f'tokens_file = "tokens.toml"\n\n[toy]\npath = "{trained / "toy"}"\n'
                        "allow_learn = true\n", "utf-8")
    port = free_port()
    boot = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import serve_recipe; "
            "from tagalign.cli import app; app()")
    server = subprocess.Popen([sys.executable, "-c", boot, str(Path(__file__).parent), "serve",
                               "--projects", str(projects), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**os.environ, "COLUMNS": "500"})  # log lines unwrapped
    url = f"http://127.0.0.1:{port}"
    client = AnnifClient(api_base=f"{url}/v1/")
    try:
        deadline = time.time() + 60
        while True:
            try:
                assert client.api_info["version"]
                break
            except requests.ConnectionError:
                assert server.poll() is None and time.time() < deadline, server.stdout.read()
                time.sleep(0.2)
        assert client.suggest("toy", "Pilze\nfungi", limit=3)[0]["uri"] == GND + PILZE
        learn = f"{url}/v1/projects/toy/learn"
        assert httpx.post(learn, json=LEARN_V1).status_code == 401
        assert httpx.post(learn, json=LEARN_V1, headers=_bearer(token)).status_code == 204
    finally:
        server.terminate()
        out = server.communicate(timeout=10)[0].decode()
    assert "writes need an API token: 1 in" in out
    assert "by token 'catalogue': 204" in out and token not in out
