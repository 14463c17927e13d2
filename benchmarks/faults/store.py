"""The feedback store fails under a live server (issue 46): the SQLite store's disk
fills (``store_disk``), a PostgreSQL store stops and restarts (``postgres``)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from benchmarks._common import free_port
from benchmarks.faults.common import CLI

# -- the feedback store fails under a live server (issue 46) ------------------------------
#: how long the PostgreSQL scenario keeps its database stopped
STORE_STOP_S = 30.0


def store_row(name: str, faults: int, survived: int, lost: int, **figures) -> None:
    extra = "".join(f", {k} {v}" for k, v in figures.items())
    print(f"{name:9s} faults {faults:3d}, survived {survived:3d}, decisions lost {lost}{extra}",
          flush=True)


class StoreServer:
    """`tagalign serve PROJECT --allow-learn ARGS` on a free port in a session of its own
    (kill -9 takes the supervisor and its workers), its output in ``log``."""

    def __init__(self, project: Path, *args: str, log: Path):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/tagalign/v1/projects/{project.name}"
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([*CLI, "serve", str(project), "--port", str(self.port),
                                          "--allow-learn", *args], stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 300
        while True:
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def warnings(self, phrase: str) -> int:
        return " ".join(self.log.read_text(errors="replace").split()).count(phrase)


def store_load(ctx, url: str, tag: str):
    """Two learners (one new record id a request, a dev record's first 3 subjects) and
    one suggester (the dev records in turn)."""
    import zlib

    from tests.faultkit import MixedLoad

    dev = ctx.dev

    def learn(rid: str) -> dict:
        rec = dev[zlib.crc32(rid.encode()) % len(dev)]
        return {"records": [{"id": rid, "title": rec.title, "abstract": rec.abstract,
                             "language": rec.language, "subjects": rec.subjects[:3]}]}

    def suggest(k: int) -> dict:
        rec = dev[k % len(dev)]
        return {"title": rec.title, "abstract": rec.abstract, "limit": 10}

    return MixedLoad(url, learn, suggest, learners=2, suggesters=1, tag=tag)


def wait(condition, timeout: float = 120) -> bool:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


def _merge(total: dict, statuses: dict) -> dict:
    for kind, by_status in statuses.items():
        for status, n in by_status.items():
            total.setdefault(kind, {}).setdefault(status, 0)
            total[kind][status] += n
    return total


def scenario_store_disk(ctx, rng: random.Random) -> None:
    """`serve --allow-learn` with its SQLite feedback store on a 64 MiB tmpfs, filled up
    ``--kills`` times under a learn + suggest load for a seeded 1-5 s, then freed: suggests
    must all answer 200, learns 200 or 507, and learn again once space is free (no
    restart); at the end the server is killed -9 and every acknowledged learn must be in
    the store."""
    from tests.faultkit import SmallDisk

    project = ctx.work / "served-store-disk"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ctx.project, project)
    log = ctx.work / "store-disk.log"
    log.unlink(missing_ok=True)
    with SmallDisk(ctx.work / "small-disk", 64 << 20) as disk:
        db = disk.path / "feedback.sqlite"
        db.unlink(missing_ok=True)
        server = StoreServer(project, "--feedback-db", f"sqlite:///{db}", log=log)
        load = store_load(ctx, server.url, "disk")
        faults = survived = full_refused = 0
        recovery: list[float] = []
        try:
            for _ in range(ctx.kills):
                t0 = time.time()
                wait(lambda t=t0: load.count("learn", 200, t) >= 5)
                disk.fill()
                full = time.time()
                faults += 1
                time.sleep(rng.uniform(1.0, 5.0))
                disk.free()
                freed = time.time()
                back = wait(lambda t=freed: load.count("learn", 200, t) >= 1)
                recovery.append(time.time() - freed)
                bad = [a for a in load.answers if a.at >= full and not (
                    a.status == 200 or (a.kind == "learn" and a.status == 507))]
                full_refused += load.count("learn", 507, full) > 0
                survived += back and not bad
            acked = list(load.acked)
            server.kill()
        finally:
            load.halt()
            server.kill()
        with sqlite3.connect(db) as con:
            intact = con.execute("pragma integrity_check").fetchone()[0] == "ok"
            stored = {r for (r,) in con.execute("select record_id from decisions")}
    lost = len(set(acked) - stored)
    store_row("store_disk", faults, survived, lost, rounds_with_507=full_refused,
               learn_acknowledged=len(acked), statuses=load.statuses(),
               recovery_s_max=round(max(recovery, default=0), 2), integrity_ok=intact,
               no_space_warnings=server.warnings("no space left ("),
               disk_mib=64)


def scenario_postgres(ctx, rng: random.Random) -> None:
    """`serve --workers 2 --allow-learn --feedback-db postgresql://…` on a PostgreSQL
    cluster of its own (Debian's binaries) under a learn + suggest load: restarted
    ``--kills`` times (a seeded 1-3 s of load between), stopped for `STORE_STOP_S` s
    ``max(1, kills // 10)`` times, then ``max(1, kills // 5)`` servers killed -9 under
    the load. Suggests must all answer 200, learns 200 or 503 (with Retry-After), learns
    work again once the database is back without a server restart, and every
    acknowledged learn is in the database."""
    from tests.faultkit import PostgresCluster

    project = ctx.work / "served-postgres"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ctx.project, project)
    log = ctx.work / "store-postgres.log"
    log.unlink(missing_ok=True)
    statuses: dict = {}
    acked: list[str] = []
    faults = survived = 0
    restart_recovery: list[float] = []
    stop_recovery: list[float] = []
    with PostgresCluster() as pg:
        db = pg.database("faults")
        args = ("--workers", "2", "--feedback-db", db)
        server = StoreServer(project, *args, log=log)
        load = store_load(ctx, server.url, "pg")
        try:
            wait(lambda: load.count("learn", 200) >= 5)
            for kind in ["restart"] * ctx.kills + ["stop"] * max(1, ctx.kills // 10):
                time.sleep(rng.uniform(1.0, 3.0))
                start = time.time()
                if kind == "restart":
                    pg.restart()
                else:
                    pg.stop()
                    time.sleep(STORE_STOP_S)
                    pg.start()
                faults += 1
                up = time.time()
                back = wait(lambda t=up: load.count("learn", 200, t) >= 1)
                (restart_recovery if kind == "restart" else stop_recovery).append(
                    time.time() - up)
                wait(lambda t=up: load.count("suggest", None, t) >= 1)
                bad = [a for a in load.answers if a.at >= start and not (
                    a.status == 200 or (a.kind == "learn" and a.status == 503
                                        and a.retry_after))]
                survived += back and not bad
            warnings = server.warnings("its database is unavailable")
            acked += load.acked
            server.kill()
        finally:
            load.halt()
            server.kill()
        _merge(statuses, load.statuses())
        kills = max(1, ctx.kills // 5)
        killed_ok = 0
        for i in range(kills):
            server = StoreServer(project, *args, log=log)
            load = store_load(ctx, server.url, f"kill{i}")
            try:
                wait(lambda lo=load: lo.count("learn", 200) >= 3)
                time.sleep(rng.uniform(0.5, 3.0))
                server.kill()
                seen = list(load.acked)
            finally:
                load.halt()
                server.kill()
            _merge(statuses, load.statuses())
            acked += seen
            faults += 1
            from tagalign.feedback import FeedbackStore

            store = FeedbackStore(db)
            with store.engine.connect() as conn:
                stored = {r for (r,) in conn.exec_driver_sql("select record_id from decisions")}
            store.close()
            killed_ok += not set(seen) - stored
        survived += killed_ok
    lost = len(set(acked) - stored)
    store_row("postgres", faults, survived, lost, restarts=ctx.kills,
               stops=f"{max(1, ctx.kills // 10)}x{STORE_STOP_S:.0f}s", kills=kills,
               learn_acknowledged=len(acked), statuses=statuses,
               restart_recovery_s_max=round(max(restart_recovery, default=0), 2),
               stop_recovery_s_max=round(max(stop_recovery, default=0), 2),
               outage_warnings=warnings)
