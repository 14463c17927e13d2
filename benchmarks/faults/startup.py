"""`tagalign serve` started while its feedback store is away or wrong (issue 64).

Away: ``start_full`` (the SQLite store's tmpfs full before the start), ``start_readonly``
(the tmpfs of an existing store remounted read-only) and ``start_postgres_down`` (a real
PostgreSQL stopped, ``--workers 2``). Each round starts the server in that state, measures
the seconds to the first suggest answered 200, puts a learn + suggest load on it for
`AWAY_S` s (learns must answer 507, or 503 with Retry-After; suggests 200), gives the store
back (frees the space, remounts it writable, starts the database), measures the seconds to
the first learn answered 200 (no restart), then kills the server -9: every acknowledged
learn must be in the store. ``start_wrong``: a file that is no feedback store, a schema of a
newer tagalign and a PostgreSQL role that does not exist: the server must exit 1 with one
``error:`` line and no warning; the seconds it took. ``max(1, --kills // 10)`` rounds each.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks._common import free_port
from benchmarks.faults.common import CLI
from benchmarks.faults.store import StoreServer, store_load, store_row, wait

#: seconds a started server stays under load with its store away
AWAY_S = 5.0


def _project(ctx, name: str) -> Path:
    project = ctx.work / name
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ctx.project, project)
    return project


def _sqlite_ids(db: Path) -> set[str]:
    with sqlite3.connect(db) as con:
        return {r for (r,) in con.execute("select record_id from decisions")}


def _away_rounds(ctx, name: str, refused: int, start: Callable[[], tuple[tuple, Callable]],
                 stored_ids: Callable[[], set[str]]) -> None:
    """``max(1, kills // 10)`` rounds: ``start()`` takes the store away and returns the
    server's arguments and how to give the store back; learns while away must answer
    ``refused`` (a 503 with Retry-After)."""
    project = _project(ctx, f"served-{name}")
    log = ctx.work / f"{name}.log"
    log.unlink(missing_ok=True)
    rounds = max(1, ctx.kills // 10)
    survived = lost = acknowledged = 0
    first: list[float] = []
    back_s: list[float] = []
    away: dict[str, dict[int, int]] = {}
    for i in range(rounds):
        args, give_back = start()
        t0 = time.time()
        server = StoreServer(project, *args, log=log)
        load = store_load(ctx, server.url, f"{name}{i}")
        try:
            wait(lambda lo=load: lo.count("suggest", 200) >= 1)
            first.append(min(a.at for a in load.answers if a.kind == "suggest"
                             and a.status == 200) - t0)
            time.sleep(AWAY_S)
            given = time.time()
            give_back()
            back = wait(lambda lo=load, t=given: lo.count("learn", 200, t) >= 1)
            back_s.append(time.time() - given)
            wait(lambda lo=load: len(lo.acked) >= 5)
            seen = list(load.acked)
            server.kill()
        finally:
            load.halt()
            server.kill()
        while_away = [a for a in load.answers if a.at < given]
        for a in while_away:
            away.setdefault(a.kind, {}).setdefault(a.status, 0)
            away[a.kind][a.status] += 1
        expected = all(a.status == 200 if a.kind == "suggest" else
                       a.status == refused and (refused == 507 or a.retry_after)
                       for a in while_away)
        missing = set(seen) - stored_ids()
        lost += len(missing)
        acknowledged += len(seen)
        survived += back and expected and not missing
    warned = " ".join(log.read_text(errors="replace").split())
    store_row(name, rounds, survived, lost, first_suggest_s_max=round(max(first), 2),
              answers_while_away=away, to_learning_s_max=round(max(back_s), 2),
              learn_acknowledged=acknowledged,
              errors=warned.count("error:"), outage_warnings=warned.count(
                  "no space left (" if refused == 507 else "its database is unavailable ("))


def scenario_start_full(ctx, rng: random.Random) -> None:
    from tests.faultkit import SmallDisk

    with SmallDisk(ctx.work / "start-full", 16 << 20) as disk:
        db = disk.path / "feedback.sqlite"

        def start():
            for f in disk.path.glob("feedback.sqlite*"):
                f.unlink()
            disk.fill()  # not even the store's file can be made
            return ("--feedback-db", f"sqlite:///{db}"), disk.free

        _away_rounds(ctx, "start_full", 507, start, lambda: _sqlite_ids(db))


def scenario_start_readonly(ctx, rng: random.Random) -> None:
    from tagalign.feedback import FeedbackStore
    from tests.faultkit import SmallDisk

    with SmallDisk(ctx.work / "start-readonly", 16 << 20) as disk:
        db = disk.path / "feedback.sqlite"
        FeedbackStore(f"sqlite:///{db}").close()  # a store of earlier days

        def start():
            disk.read_only()
            return ("--feedback-db", f"sqlite:///{db}"), lambda: disk.read_only(False)

        _away_rounds(ctx, "start_readonly", 503, start, lambda: _sqlite_ids(db))


def scenario_start_postgres_down(ctx, rng: random.Random) -> None:
    from tagalign.feedback import FeedbackStore
    from tests.faultkit import PostgresCluster

    with PostgresCluster() as pg:
        db = pg.database("start")

        def start():
            pg.stop()
            return ("--workers", "2", "--feedback-db", db), pg.start

        def stored() -> set[str]:
            store = FeedbackStore(db)
            try:
                with store.engine.connect() as conn:
                    return {r for (r,) in conn.exec_driver_sql(
                        "select record_id from decisions")}
            finally:
                store.close()

        _away_rounds(ctx, "start_postgres_down", 503, start, stored)


def scenario_start_wrong(ctx, rng: random.Random) -> None:
    from tagalign.feedback import FeedbackStore
    from tagalign.feedback.schema import SCHEMA_VERSION
    from tests.faultkit import PostgresCluster

    folder = ctx.work / "start-wrong"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "subjects.tsv").write_text("id\tlabel\n")
    FeedbackStore(f"sqlite:///{folder / 'newer.sqlite'}").close()
    with sqlite3.connect(folder / "newer.sqlite") as con:
        con.execute("update tagalign_schema set version = ?", (SCHEMA_VERSION + 1,))
    rounds = max(1, ctx.kills // 10)
    faults = survived = 0
    seconds: list[float] = []
    with PostgresCluster() as pg:
        urls = [f"sqlite:///{folder / 'subjects.tsv'}", f"sqlite:///{folder / 'newer.sqlite'}",
                pg.database("wrong").replace("postgres@", "nobody@", 1)]
        for _ in range(rounds):
            for url in urls:
                t0 = time.time()
                done = subprocess.run([*CLI, "serve", str(ctx.project), "--port",
                                       str(free_port()), "--allow-learn", "--feedback-db",
                                       url], capture_output=True, text=True, timeout=600)
                seconds.append(time.time() - t0)
                lines = [x for x in done.stderr.splitlines() if x.startswith("error:")]
                faults += 1
                survived += (done.returncode == 1 and len(lines) == 1
                             and "cannot open the feedback store" in lines[0]
                             and "WARNING" not in done.stderr)
    store_row("start_wrong", faults, survived, 0, cases="not-a-store,newer-schema,pg-role",
              seconds_to_refuse_max=round(max(seconds), 2))


__all__ = ["scenario_start_full", "scenario_start_postgres_down", "scenario_start_readonly",
           "scenario_start_wrong"]
