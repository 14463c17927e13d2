"""`tagalign serve` starting while its feedback store is away or wrong (issue 64).

Away (a full volume, a read-only one, PostgreSQL stopped): the server starts and suggests
at once; learns on both APIs and the review queue answer 507 or 503 (with Retry-After),
saying nothing was stored; one warning says so; once the store is given back, learning
works with no restart, and with two workers both learn what was stored since, not what was
there before the server started. Wrong (PostgreSQL refusing the role, a schema from a newer
tagalign, a file that is not a feedback store): the server does not start, with one
``error:`` line. Real parts: `tagalign serve` processes, a size-limited tmpfs, a
PostgreSQL cluster (`faultkit`).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from faultkit import SmallDisk, Unavailable, free_port
from serving import ServeProcess
from tagalign.feedback import RETRY_AFTER, Decision, FeedbackStore, sqlite_url
from tagalign.feedback.schema import SCHEMA_VERSION
from tagalign.records import Record

API = "/tagalign/v1/projects/tiny"
T = 60  # seconds to wait for an answer or a condition (a loaded machine is slow)
TEXT = {"title": "Pilze der Zukunft", "abstract": "mushroom fungi forecast scenario"}
ZUKUNFT = "4068097-6"
START = ("--allow-learn", "--no-compile-ranker")


def learn(url: str, rid: str) -> httpx.Response:
    return httpx.post(f"{url}{API}/learn", timeout=T, json={"records": [
        {"id": rid, **TEXT, "subjects": [ZUKUNFT]}]})


def annif_learn(url: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/projects/tiny/learn", timeout=T, json=[{
        "text": f"{TEXT['title']}\n{TEXT['abstract']}",
        "subjects": [{"uri": f"https://d-nb.info/gnd/{ZUKUNFT}"}]}])


def suggest(url: str) -> httpx.Response:
    res = httpx.post(f"{url}{API}/suggest", json={**TEXT, "limit": 8}, timeout=T)
    assert res.status_code == 200 and res.json()["results"], res.text
    return res


def until(answer, status: int, what: str):
    """``answer()`` again until it has ``status`` (a store given back: no restart)."""
    deadline = time.time() + T
    while (res := answer()).status_code != status:
        assert time.time() < deadline, f"timed out waiting for {what}: {res.text}"
        time.sleep(0.2)
    return res


def small_disk(tmp_path) -> SmallDisk:
    try:
        return SmallDisk(tmp_path / "small", 512 * 1024)
    except Unavailable as exc:
        pytest.skip(str(exc))


def one_warning(srv: ServeProcess, phrase: str) -> None:
    log = " ".join(srv.log().split())
    assert log.count(phrase) == 1, srv.log()
    assert "error:" not in log and "Traceback" not in log, srv.log()


def test_a_full_volume_at_start_serves_and_learns_once_space_is_freed(tiny_hybrid, tmp_path):
    project = shutil.copytree(tiny_hybrid, tmp_path / "tiny")
    with small_disk(tmp_path) as disk:
        disk.fill()  # full before the server starts: its store cannot even be made
        db = disk.path / "feedback.sqlite"
        srv = ServeProcess(str(project), *START, "--feedback-db", sqlite_url(db),
                           log=tmp_path / "log")
        try:
            srv.wait_ready("tiny")
            suggest(srv.url)
            full = learn(srv.url, "full")
            assert full.status_code == 507
            assert full.json()["detail"] == ("no space left on the feedback store's disk: "
                                              "nothing was stored; learning works again "
                                              "once space is freed")
            annif = annif_learn(srv.url)
            assert annif.status_code == 507
            assert annif.headers["content-type"] == "application/problem+json"
            assert annif.json()["title"] == "Insufficient Storage"
            one_warning(srv, "no space left (")

            disk.free()
            res = until(lambda: learn(srv.url, "freed"), 200, "a learn once space is freed")
            assert res.json() == {"stored": 1, "learned": True}
            assert "works again" in srv.log()
        finally:
            assert srv.stop() == 0
        with sqlite3.connect(db) as con:
            assert {r for (r,) in con.execute("select record_id from decisions")} == {"freed"}


def test_a_read_only_volume_at_start_answers_503_until_it_is_writable(tiny_hybrid, tmp_path):
    project = shutil.copytree(tiny_hybrid, tmp_path / "tiny")
    queue = tmp_path / "queue.jsonl"
    queue.write_text("".join(json.dumps({"id": f"q{i}", "language": "de", **TEXT}) + "\n"
                             for i in range(2)))
    with small_disk(tmp_path) as disk:
        db = disk.path / "feedback.sqlite"
        store = FeedbackStore(sqlite_url(db))  # a store of earlier days, now read-only
        store.add("tiny", [Decision(Record(id="earlier", **TEXT), [ZUKUNFT])])
        store.close()
        disk.read_only()
        srv = ServeProcess(str(project), *START, "--feedback-db", sqlite_url(db),
                           "--queue", str(queue), log=tmp_path / "log")
        try:
            srv.wait_ready("tiny")
            suggest(srv.url)
            for res in (learn(srv.url, "ro"), annif_learn(srv.url),
                        httpx.post(f"{srv.url}{API}/queue/0/finish", json={}, timeout=T)):
                assert res.status_code == 503, res.text
                assert res.headers["retry-after"] == str(RETRY_AFTER)
                assert "unavailable: nothing was stored" in res.text
            one_warning(srv, "its database is unavailable (")

            disk.read_only(False)
            until(lambda: learn(srv.url, "writable"), 200, "a learn once it is writable")
            done = httpx.post(f"{srv.url}{API}/queue/0/finish", json={}, timeout=T)
            assert done.status_code == 200 and done.json()["finished"] == 1, done.text
        finally:
            assert srv.stop() == 0
        with sqlite3.connect(db) as con:
            stored = {r for (r,) in con.execute("select record_id from decisions")}
            version = con.execute("select version from tagalign_schema").fetchone()
        assert stored == {"earlier", "writable"}
        assert version == (SCHEMA_VERSION,)  # marked once it took writes


def neighbours(res: httpx.Response) -> set[str]:
    """The ids of the records that voted for `ZUKUNFT` (a learned one among them)."""
    return {n["id"] for s in res.json()["results"] if s["id"] == ZUKUNFT
            for n in (s.get("reasons") or {}).get("neighbours", [])}


def test_postgres_down_at_start_then_up_learns_in_both_workers_without_a_restart(
        postgres_cluster, tiny_hybrid, tmp_path):
    """Two workers start while the database is stopped; once it is started they learn
    what is stored from then on, each the same, and neither what was there before."""
    pg = postgres_cluster
    db = pg.database("store_start")
    project = shutil.copytree(tiny_hybrid, tmp_path / "tiny")
    before = FeedbackStore(db)  # a decision of an earlier server: not learned by this one
    before.add("tiny", [Decision(Record(id="before-start", **TEXT), [ZUKUNFT])])
    before.close()
    pg.stop()
    srv = ServeProcess(str(project), *START, "--workers", "2", "--feedback-db", db,
                       log=tmp_path / "log")
    try:
        pids = {w["pid"] for w in srv.wait_ready("tiny", workers=2)["workers"]}
        assert neighbours(suggest(srv.url)) & {"before-start", "after-start"} == set()
        for res in (learn(srv.url, "refused"), annif_learn(srv.url)):
            assert res.status_code == 503 and res.headers["retry-after"] == str(RETRY_AFTER)
            assert "unavailable: nothing was stored" in res.text
        log = " ".join(srv.log().split())
        assert 1 <= log.count("its database is unavailable (") <= 2, srv.log()  # per worker
        assert "error:" not in log

        pg.start()
        res = until(lambda: learn(srv.url, "after-start"), 200, "a learn once it is back")
        assert res.json()["learned"] is True
        # each worker catches up from the store once it reaches it again (a worker
        # that has not yet probed the store back answers untaught for up to a second)
        caught: set[int] = set()
        deadline = time.time() + T
        while caught != pids:
            assert time.time() < deadline, caught
            res = suggest(srv.url)
            found = neighbours(res)
            assert "before-start" not in found, found
            if "after-start" in found:
                caught.add(int(res.headers["x-worker"]))
    finally:
        if not pg.running():
            pg.start()
        assert srv.stop() == 0


def _refused_role(request, tmp_path) -> str:
    pg = request.getfixturevalue("postgres_cluster")
    return pg.database("store_wrong").replace("postgres@", "nobody@", 1)


def _newer(_request, tmp_path) -> str:
    url = sqlite_url(tmp_path / "newer.sqlite")
    FeedbackStore(url).close()
    with sqlite3.connect(tmp_path / "newer.sqlite") as con:
        con.execute("update tagalign_schema set version = ?", (SCHEMA_VERSION + 1,))
    return url


def _not_a_store(_request, tmp_path) -> str:
    (tmp_path / "subjects.tsv").write_text("id\tlabel\n")
    return sqlite_url(tmp_path / "subjects.tsv")


@pytest.mark.parametrize(("make", "says"), [
    (_refused_role, 'FATAL: role "nobody" does not exist'),
    (_newer, f"it was made by a newer tagalign (schema version {SCHEMA_VERSION + 1}"),
    (_not_a_store, "not a feedback store (file is not a database)"),
], ids=["postgres-role", "newer-schema", "not-a-store"])
def test_a_wrong_store_stops_the_start_with_one_line(request, tiny_hybrid, tmp_path, make,
                                                     says):
    url = make(request, tmp_path)
    done = subprocess.run([sys.executable, "-m", "tagalign.cli.main", "serve",
                           str(tiny_hybrid), *START, "--port", str(free_port()),
                           "--feedback-db", url], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("error: cannot open the feedback store ")
    assert says in " ".join(errors[0].split()), errors
    assert "WARNING" not in done.stderr and "Traceback" not in done.stderr, done.stderr
