"""The feedback store fails under a live server (issue 46): its disk fills up, its
PostgreSQL restarts, stops for a while, and the server is killed under load.

Real parts only: a size-limited tmpfs holding the SQLite store, filled up by the test; a
PostgreSQL cluster of the session's (Debian's binaries, `faultkit.PostgresCluster`),
restarted and stopped under a learn + suggest load against `tagalign serve --workers 2`.
What must hold: suggest keeps answering; learns fail with 507 (no space) or 503 with
``Retry-After`` (database gone), each API in its own error shape, counted in ``/metrics``
and logged once per outage, not per request; every acknowledged learn is in the store,
also after a kill -9 of the server; learning works again, without a restart, once the
space is freed or the database is back.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sqlite3
import time
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import create_engine, text

from faultkit import MixedLoad, SmallDisk, Unavailable
from serving import LiveServer, MetricSamples, ServeProcess
from tagalign.feedback import RETRY_AFTER

API = "/tagalign/v1/projects/tiny"
T = 60  # seconds to wait for an answer or a condition (a loaded machine is slow)
SUGGEST = {"title": "Pilze im Holz", "abstract": "mushroom rot timber decay", "limit": 5}


def learn_body(rid: str) -> dict:
    return {"records": [{"id": rid, "title": "Pilze der Zukunft", "language": "de",
                         "abstract": "mushroom fungi forecast scenario",
                         "subjects": ["4046076-9", "4068097-6"]}]}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = T,
             load: Load | None = None) -> None:
    """Until ``condition()``; fails at once when the ``load`` got an answer it must not."""
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        if load is not None:
            load.check()
        time.sleep(0.05)


class Lines(logging.Handler):
    """The records one logger emits (the CLI's handlers may keep them from the root)."""

    def __init__(self, name: str):
        super().__init__(logging.INFO)
        self.logger = logging.getLogger(name)
        self.messages: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelname, record.getMessage()))

    def __enter__(self) -> Lines:
        self.logger.addHandler(self)
        self.level_before = self.logger.level
        self.logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)


# -- a full disk --------------------------------------------------------------------------
def test_a_full_disk_fails_learns_with_507_and_they_work_again_once_space_is_freed(
        tiny_hybrid, tmp_path):
    from tagalign.serve import factory
    from tagalign.serve.process import ServingProcess
    from tagalign.serve.settings import ServerSettings

    try:
        disk = SmallDisk(tmp_path / "small", 512 * 1024)
    except Unavailable as exc:
        pytest.skip(str(exc))
    with disk, Lines("tagalign.feedback.health") as logged:
        db = disk.path / "feedback.sqlite"
        project = shutil.copytree(tiny_hybrid, tmp_path / "tiny")
        settings = ServerSettings(projects=[str(project)], allow_learn=True,
                                  feedback_db=f"sqlite:///{db}", compile_ranker=False,
                                  log_format="json")
        with LiveServer(factory.build_app(settings, ServingProcess())) as live:
            url = f"{live.url}{API}"
            acked = []

            def learn(rid: str) -> httpx.Response:
                res = httpx.post(f"{url}/learn", json=learn_body(rid), timeout=T)
                if res.status_code == 200:
                    acked.append(rid)
                return res

            for i in range(3):
                assert learn(f"before-{i}").status_code == 200
            disk.fill()
            full = [learn(f"full-{i}") for i in range(3)]
            assert [r.status_code for r in full] == [507] * 3
            assert "no space left" in full[0].json()["detail"]
            assert str(disk.path) not in full[0].text  # the client is told no folder
            annif = httpx.post(f"{live.url}/v1/projects/tiny/learn", timeout=T, json=[{
                "text": "Pilze\nmushroom rot", "subjects": [
                    {"uri": "https://d-nb.info/gnd/4046076-9"}]}])
            assert annif.status_code == 507
            assert annif.headers["content-type"] == "application/problem+json"
            assert annif.json()["title"] == "Insufficient Storage"
            assert "no space left" in annif.json()["detail"]
            res = httpx.post(f"{url}/suggest", json=SUGGEST, timeout=T)
            assert res.status_code == 200 and res.json()["results"]
            metrics = MetricSamples(httpx.get(f"{live.url}/metrics", timeout=T).text)
            assert metrics("tagalign_learn_failures_total", project="tiny",
                           reason="no_space") == 4
            warnings = [m for level, m in logged.messages if level == "WARNING"]
            assert len(warnings) == 1 and "no space left" in warnings[0]
            assert str(db) in warnings[0]  # the log names the file

            disk.free()  # space again: learning works, no restart
            res = learn("after")
            assert res.status_code == 200 and res.json() == {"stored": 2, "learned": True}
            assert any("works again" in m for _, m in logged.messages)
        with sqlite3.connect(db) as con:
            assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
            stored = {r for (r,) in con.execute("select record_id from decisions")}
    assert stored == set(acked) == {"before-0", "before-1", "before-2", "after"}


# -- a database that goes away ------------------------------------------------------------
class Load(MixedLoad):
    """Two clients learning, one suggesting (`faultkit.MixedLoad`)."""

    def __init__(self, url: str, tag: str = "l"):
        super().__init__(url, learn_body, lambda _: SUGGEST, learners=2, suggesters=1,
                         tag=tag, timeout=T)

    def check(self) -> None:
        """Suggests all answered 200, learns 200 or 503 with ``Retry-After``."""
        for a in list(self.answers):
            ok = a.status == 200 or (a.kind == "learn" and a.status == 503
                                     and a.retry_after == str(RETRY_AFTER))
            assert ok, a


def stored_ids(url: str) -> set[str]:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return {r for (r,) in conn.execute(text("select record_id from decisions"))}
    finally:
        engine.dispose()


def test_postgres_restart_stop_and_a_killed_server_lose_no_acknowledged_learn(
        postgres_cluster, tiny_hybrid, tmp_path):
    pg = postgres_cluster
    db = pg.database("store_faults")
    project = shutil.copytree(tiny_hybrid, tmp_path / "tiny")
    srv = ServeProcess(str(project), "--allow-learn", "--no-compile-ranker",
                       "--workers", "2", "--feedback-db", db, log=tmp_path / "log")
    loads: list[Load] = []
    try:
        info = srv.wait_ready("tiny", workers=2)
        pids = [srv.proc.pid, *(w["pid"] for w in info["workers"])]
        url = f"{srv.url}{API}"
        load = Load(url)
        loads.append(load)
        wait_for(lambda: len(load.acked) >= 3 and load.count("suggest", 200) >= 3, "a load",
                 load=load)

        pg.restart()  # a restart of a few seconds at most: learns wait for it
        mark = time.time()
        wait_for(lambda: load.count("learn", 200, mark) >= 3, "learns after a restart",
                 load=load)

        pg.stop()  # for longer than a learn waits (`RETRY_WINDOW`): 503s, suggests go on
        down = time.time()
        try:
            wait_for(lambda: load.count("learn", 503, down) >= 10, "learns refused",
                     load=load)
            first = min(a.at for a in load.answers if a.kind == "learn" and a.status == 503)
            wait_for(lambda: load.count("suggest", 200, first) >= 3, "suggests meanwhile",
                     load=load)
        finally:
            pg.start()
        up = time.time()
        wait_for(lambda: load.count("learn", 200, up) >= 3, "learns once the database is back",
                 load=load)
        load.halt()
        load.check()
        refused = [a.body for a in load.answers if a.kind == "learn" and a.status == 503]
        assert all("unavailable" in b and "nothing was stored" in b for b in refused)
        metrics = MetricSamples(httpx.get(f"{srv.url}/metrics", timeout=T).text)
        assert metrics("tagalign_learn_failures_total", project="tiny",
                       reason="unavailable") == len(refused)
        # one warning per outage and worker (the restart may be one), not one per request
        log = " ".join(srv.log().split())
        warned = log.count("its database is unavailable")
        assert 1 <= warned <= 4 < len(refused), (warned, len(refused))
        assert "works again" in log

        # kill -9 of the server under that load: what it acknowledged is stored
        load = Load(url, tag="k")
        loads.append(load)
        wait_for(lambda: len(load.acked) >= 5, "learns before the kill")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        srv.proc.wait(T)
        acked_before_kill = list(load.acked)
        load.halt()
        missing = set(acked_before_kill) - stored_ids(db)
        assert not missing
    finally:
        for each in loads:
            each.halt()
        srv.stop()
        if not pg.running():
            pg.start()
    assert {rid for each in loads for rid in each.acked} <= stored_ids(db)
