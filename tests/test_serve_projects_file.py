"""A projects file broken after `tagalign serve --projects F` started (issue 64): the
server read it once, at start (`ServerSettings.read_at_start`), and every later load
parses that text — a worker started in place of one that died, a model swap on SIGHUP —
so they serve the projects as they were instead of stopping the server or refusing the
new model; on SIGHUP the log says once what became of the file. A file broken at start
still stops the start with one line. A worker started after the tokens file broke serves
too (refusing tokens until the file reads: `tagalign.serve.tokens`). The servers: real
ones in a subprocess (tiny hybrids, ``--workers 2``), a worker killed with SIGKILL."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import ServeProcess, logged
from tagalign.cli import app as cli
from tagalign.project import Project, model_version
from tagalign.projects_file import ProjectsFileError
from tagalign.runtime import Runtime
from tagalign.serve.loading import load_served, note_projects_file
from tagalign.serve.settings import ServerSettings
from tagalign.serve.tokens import TokenStore
from test_serve_reload import API, QUERY, T, answers, swap_in
from tiny_models import tiny_records, tiny_vocab

TOML = '[tiny]\npath = "tiny"\nlimit = 3\n'
#: what a projects file can become after start
BROKEN = {"bad TOML": "[tiny\npath = ", "a bad table": '[tiny]\npath = "tiny"\nlimt = 3\n',
          "gone": None}


@pytest.fixture()
def toy(tmp_path) -> Path:
    """A projects file of one toy project (the table's limit: 3), the file's path."""
    Project.create(tmp_path / "toy", tiny_vocab(), "test-overlap").train(tiny_records(20))
    (tmp_path / "projects.toml").write_text(TOML.replace("tiny", "toy"), encoding="utf-8")
    return tmp_path / "projects.toml"


@pytest.mark.parametrize("how", list(BROKEN))
def test_what_a_server_loads_after_start_is_the_file_read_at_start(toy, how):
    settings = ServerSettings(projects_file=str(toy)).read_at_start()
    assert settings.projects_text == toy.read_text("utf-8")
    assert settings.read_at_start() is settings  # read once
    worker = ServerSettings.from_json(settings.to_json())  # what a worker gets
    break_file(toy, how)
    with pytest.raises(ProjectsFileError):
        ServerSettings(projects_file=str(toy)).read_at_start()  # a new start: refused
    assert worker.served() == {"toy": (toy.parent / "toy", None)}  # relative to the file
    loaded = load_served(worker, Runtime())
    assert list(loaded) == ["toy"] and loaded["toy"].serving.limit == 3
    with logged("tagalign.serve.loading", logging.WARNING) as seen:
        note_projects_file(worker)
    assert len(seen) == 1 and seen[0].endswith(
        "; the projects read from it at start keep serving as they were"), seen
    assert ("projects file not found" if how == "gone" else
            "unknown key" if how == "a bad table" else "not a readable TOML file") in seen[0]


def test_sighup_says_nothing_of_a_file_unchanged_and_once_of_one_changed(toy):
    settings = ServerSettings(projects_file=str(toy)).read_at_start()
    with logged("tagalign.serve.loading", logging.WARNING) as seen:
        note_projects_file(settings)
        assert seen == []
        toy.write_text(TOML.replace("tiny", "toy").replace("3", "1"), encoding="utf-8")
        note_projects_file(settings)
    assert seen == [f"projects file {toy} changed since the server started; a reload "
                    "reads only the project folders: restart the server to serve its "
                    "changes"]
    assert load_served(settings, Runtime())["toy"].serving.limit == 3  # as at start


def test_a_server_does_not_start_with_a_broken_projects_file(toy):
    toy.write_text(BROKEN["bad TOML"], encoding="utf-8")
    res = CliRunner().invoke(cli, ["serve", "--projects", str(toy)])
    assert res.exit_code == 1
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines[0].startswith(f"error: {toy}: not a readable TOML file"), res.output


def workers(url: str) -> dict[int, str]:
    return {w["pid"]: w["version"]
            for w in httpx.get(f"{url}{API}", timeout=T).json()["workers"]}


def wait_for(srv: ServeProcess, done, what: str, timeout: float = 180):
    deadline = time.time() + timeout
    while True:
        assert srv.proc.poll() is None, f"the server stopped ({what}):\n{srv.log()}"
        try:
            if found := done():
                return found
        except httpx.HTTPError:  # a worker ending as it answered
            pass
        assert time.time() < deadline, f"{what}:\n{srv.log()}"
        time.sleep(0.2)


def break_file(path: Path, how: str) -> None:
    if BROKEN[how] is None:
        path.unlink()
    else:
        path.write_text(BROKEN[how], encoding="utf-8")


def served(srv: ServeProcess) -> tuple[int, str, list[tuple[str, float]]]:
    """One suggest without a limit: who answered, its model, the results (the file's
    ``limit = 3`` must hold)."""
    body = {k: v for k, v in QUERY.items() if k != "limit"}
    res = httpx.post(f"{srv.url}{API}/suggest", json=body, timeout=T)
    assert res.status_code == 200, res.text
    return (int(res.headers["x-worker"]), res.headers["x-model-version"],
            [(r["id"], r["score"]) for r in res.json()["results"]])


@pytest.fixture()
def deployment(tiny_hybrids, tmp_path) -> Path:
    shutil.copytree(tiny_hybrids[0], tmp_path / "tiny")
    (tmp_path / "projects.toml").write_text(TOML, encoding="utf-8")
    return tmp_path


def _serve(root: Path, *args: str) -> ServeProcess:
    srv = ServeProcess("--projects", str(root / "projects.toml"), "--workers", "2",
                       "--no-compile-ranker", *args, log=root / "log")
    srv.wait_ready("tiny", workers=2)
    return srv


@pytest.mark.parametrize(("preload", "how"), [(False, "bad TOML"), (True, "a bad table")])
def test_a_worker_started_after_the_file_broke_serves_what_was_read_at_start(
        deployment, tiny_hybrids, preload, how):
    """Spawned (``--no-preload``), a new worker loads every project itself; preloaded, it
    loads the projects whose folders got a new model since the supervisor loaded them.
    Before issue 64 either read the projects file again, and a broken one failed the
    worker's start, which stops the whole server."""
    srv = _serve(deployment, *([] if preload else ["--no-preload"]))
    try:
        old_model, new_model = tiny_hybrids
        old, new = model_version(old_model)["version"], model_version(new_model)["version"]
        if preload:  # a folder the supervisor has not reloaded: the worker loads it
            swap_in(new_model, deployment / "tiny")
        break_file(deployment / "projects.toml", how)
        before = workers(srv.url)
        victim = next(iter(before))
        os.kill(victim, signal.SIGKILL)
        now = wait_for(srv, lambda: (w := workers(srv.url)) and len(w) == 2
                       and victim not in w and w, "a worker in place of the one killed")
        (fresh,) = set(now) - set(before)
        assert now[fresh] == (new if preload else old)
        expected = answers(new_model if preload else old_model)[:3]  # limit = 3: the file's
        seen = {}
        while fresh not in seen:
            pid, version, results = served(srv)
            seen[pid] = (version, results)
        assert seen[fresh] == (now[fresh], expected)
        assert "failed to start" not in srv.log()
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_worker_started_after_the_tokens_file_broke_serves_and_refuses_tokens(deployment):
    """The same for the tokens file (`TokenStore.for_server`): before issue 64 the new
    worker's app could not be built, which stops the server. The worker that read the file
    before keeps its tokens; the new one refuses them until the file reads again."""
    tokens = deployment / "tokens.toml"
    token = TokenStore(tokens).add("librarian")
    (deployment / "projects.toml").write_text(TOML + "allow_learn = true\n", encoding="utf-8")
    srv = _serve(deployment, "--no-preload", "--tokens-file", str(tokens))
    try:
        learn = {"records": [{"id": "t-1", "title": "Pilze", "subjects": ["4068097-6"]}]}

        answered: dict[int, int] = {}

        def learned_by(pids: set[int]) -> dict[int, int] | None:
            """Learn with the token (each on a new connection) until ``pids`` answered:
            worker → its last status."""
            res = httpx.post(f"{srv.url}{API}/learn", json=learn, timeout=T,
                             headers={"Authorization": f"Bearer {token}"})
            answered[int(res.headers["x-worker"])] = res.status_code
            return answered if pids <= set(answered) else None

        before = workers(srv.url)
        assert wait_for(srv, lambda: learned_by(set(before)), "both learn") \
            == dict.fromkeys(before, 200)
        tokens.write_text("[tokens\n", encoding="utf-8")
        victim, survivor = before
        os.kill(victim, signal.SIGKILL)
        now = wait_for(srv, lambda: (w := workers(srv.url)) and len(w) == 2
                       and victim not in w and w, "a worker in place of the one killed")
        (fresh,) = set(now) - set(before)
        answered.clear()
        seen = wait_for(srv, lambda: learned_by({fresh, survivor}), "both answer a learn")
        assert seen == {survivor: 200, fresh: 403}  # the last good tokens; none it can trust
        log = " ".join(srv.log().split())
        assert "every token is refused by this process until the file can be read" in log
        assert "failed to start" not in log
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_sighup_after_the_file_went_swaps_the_new_model_in(deployment, tiny_hybrids):
    """Preloaded, the supervisor loads the folders that changed and replaces the workers;
    before issue 64 it read the projects file again, and a broken one refused the new
    model ("the new models did not load")."""
    srv = _serve(deployment)
    try:
        new_model = tiny_hybrids[1]
        new = model_version(new_model)["version"]
        before = workers(srv.url)
        swap_in(new_model, deployment / "tiny")
        break_file(deployment / "projects.toml", "gone")
        srv.proc.send_signal(signal.SIGHUP)
        wait_for(srv, lambda: (w := workers(srv.url)) and len(w) == 2
                 and set(w.values()) == {new} and not set(w) & set(before),
                 "both workers replaced, serving the new model")
        _, version, results = served(srv)
        assert (version, results) == (new, answers(new_model)[:3])
        log = " ".join(srv.log().split())
        assert "the new models did not load" not in log
        said = "; the projects read from it at start keep serving as they were"
        assert log.count(said) == 1, log
        assert "projects file not found" in log.split(said)[0].rsplit("WARNING", 1)[-1]
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_sighup_after_the_file_changed_says_a_restart_serves_the_change(deployment):
    """A file edited after start changes nothing until a restart (a reload reads only the
    folders); the log says so once, from the supervisor (not from every worker)."""
    srv = _serve(deployment, "--no-preload")
    try:
        before = workers(srv.url)
        toml = deployment / "projects.toml"
        toml.write_text(TOML.replace("limit = 3", "limit = 1"), encoding="utf-8")
        srv.proc.send_signal(signal.SIGHUP)
        said = "changed since the server started; a reload reads only the project folders"
        wait_for(srv, lambda: said in " ".join(srv.log().split()), "the log line")
        time.sleep(1)  # the workers reload (nothing changed) and would say it too
        assert " ".join(srv.log().split()).count(said) == 1
        assert workers(srv.url) == before
        assert len(served(srv)[2]) == 3  # the limit read at start
    finally:
        assert srv.stop() == 0, srv.log()
