"""A soak of `tagalign serve` (issues 46 and 64; run by `python -m benchmarks.faults --only
soak`): ``clients`` concurrent clients send a seeded mix of requests for ``minutes``, each
waiting a seeded 0-1 s between two of its requests (a librarian's pace, not a flood):

    single suggest 45 %, batch suggest (10 records) 10 %, learn 15 % (one record, its id
    drawn from a pool of `LEARN_IDS`: a decision replaces the one stored for that id
    before, so a model that only keeps the latest stays the same size), subject search
    15 % (a prefix of a title word), review queue 15 % (where it stands, one record, or
    finishing one)

and every sixth of the run (10 minutes of an hour) a new version of the model is swapped
into the served folder and reloaded (`serve_load.new_version`: the manifest re-saved, so
the version differs; then POST …/reload until every worker serves it). The feedback store
is a real PostgreSQL on a small disk of its own, taken away twice and its disk filled once
(`benchmarks/faults/soak_store.py` says when and for how long, and what counts as refused
while away). Each worker's RSS is sampled every minute (every tenth of the run when that is
shorter), and the supervisor's (with ``--workers`` it holds the preloaded models it forks
workers from; a reload replaces the workers one at a time, so a worker's RSS is followed as
the workers' mean and maximum).

Reported (`benchmarks/faults/soak_report.py`): requests and failed ones by kind and status
(any answer but 200, or none, that is not refused while away; target 0), refused while
away, every acknowledged learn request in the feedback store afterwards (lost: target 0),
the workers' RSS (mean, maximum) and the supervisor's at the start, at 60 % of the run and
at the end, and its growth over the last 40 % (target ≤ 5 %), and p95 latency by tenth of
the run after a warm-up of the same load (a tenth of the run, at most a minute, not
counted; by start time; target: the last within 20 % of the first), of the single suggests
and of all requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from benchmarks.faults import soak_store
from benchmarks.faults.common import write_jsonl
from benchmarks.faults.soak_store import Outage, SoakStore
from benchmarks.serve.serve_load import linked_copy, new_version, server
from tests.loadtest import API, _learn_body, _suggest_body

LEARN_IDS = 500
JSON = {"Content-Type": "application/json"}  # POSTs without a body too
MIX = {"suggest": 45, "batch": 10, "learn": 15, "subjects": 15, "queue": 15}


@dataclass(frozen=True)
class Call:
    kind: str
    start: float  # seconds since the load began
    end: float
    status: int  # 0: no answer
    error: str | None = None


@dataclass
class Soak:
    """What one soak run saw."""

    calls: list[Call]
    acked: Counter  # learn id -> the requests for it the server acknowledged
    #: (seconds, {pid: RSS MiB}) samples of the supervisor (first) and the workers
    rss: list[tuple[float, dict[int, float]]]
    reloads: list[tuple[float, float, str | None]]  # (at s, took s, error)
    seconds: float
    warm_up: tuple[int, int] = (0, 0)  # requests before the clock started, failed ones
    outages: list[Outage] = field(default_factory=list)  # what happened to the store
    health: list[tuple[float, str]] = field(default_factory=list)  # (s, /health's status)


def worker_pids(url: str, pid: str) -> list[int]:
    """The pids of the workers serving now (none when the server does not say)."""
    try:
        res = httpx.get(f"{url}{API}/projects/{pid}", timeout=60)
        return [w["pid"] for w in res.json()["workers"]]
    except (httpx.HTTPError, ValueError, KeyError):
        return []


def rss_mib(pid: int) -> float | None:
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.NoSuchProcess:  # a worker replaced meanwhile
        return None


async def _client(http: httpx.AsyncClient, base: str, n: int, records: list, queue_size: int,
                  stop: asyncio.Event, t0: float, soak: Soak) -> None:
    rng = random.Random(n)
    learnable = [r for r in records if r.subjects]
    words = [w for r in records for w in r.title.split() if len(w) >= 4 and w.isalpha()]
    kinds, weights = list(MIX), list(MIX.values())
    while not stop.is_set():
        kind = rng.choices(kinds, weights)[0]
        rid = None
        if kind == "suggest":
            req = http.build_request("POST", f"{base}/suggest",
                                     json=_suggest_body(rng.choice(records), 10))
        elif kind == "batch":
            req = http.build_request("POST", f"{base}/suggest-batch", json={
                "records": [{"id": str(i), "title": r.title, "abstract": r.abstract}
                            for i, r in enumerate(rng.sample(records, 10))], "limit": 10})
        elif kind == "learn":
            j = rng.randrange(LEARN_IDS)
            rid = f"soak-{j}"
            req = http.build_request("POST", f"{base}/learn",
                                     json=_learn_body(learnable[j % len(learnable)], rid))
        elif kind == "subjects":
            word = rng.choice(words)
            req = http.build_request("GET", f"{base}/subjects", params={
                "prefix": word[:rng.randint(3, 6)], "limit": 10})
        else:
            what = rng.randrange(3)
            path = ("/queue" if what == 0 else f"/queue/{rng.randrange(queue_size)}"
                    + ("/finish" if what == 2 else ""))
            req = http.build_request("POST" if what == 2 else "GET", base + path, headers=JSON)
        start = time.perf_counter() - t0
        try:
            res = await http.send(req)
            status, error = res.status_code, None if res.status_code == 200 else res.text[:200]
        except httpx.HTTPError as exc:
            status, error = 0, f"{type(exc).__name__} {exc}"
        soak.calls.append(Call(kind, start, time.perf_counter() - t0, status, error))
        if rid is not None and status == 200:
            soak.acked[rid] += 1
        await asyncio.sleep(rng.uniform(0.0, 1.0))


async def _reloads(url: str, folder: Path, every: float, end: float, stop: asyncio.Event,
                   t0: float, soak: Soak) -> None:
    """A new version and a reload at each multiple of ``every`` seconds (one still going on
    at the next: that one is left out), none later than ``end`` minus half of that; one
    whose workers are not all on the new version after 600 s or when the run stops has
    failed (a later one due meanwhile is left out)."""
    pid = folder.name
    async with httpx.AsyncClient(timeout=900) as http:
        k = 1
        while True:
            due = k * every - (time.perf_counter() - t0)
            if due < 0:  # the last reload took longer than ``every``
                k += 1
                continue
            try:
                await asyncio.wait_for(stop.wait(), due)
                return
            except TimeoutError:
                pass
            k += 1
            if time.perf_counter() - t0 > end - every / 2:
                return
            at = time.perf_counter()
            error = None
            try:
                new = await asyncio.to_thread(new_version, folder)
                res = await http.post(f"{url}{API}/projects/{pid}/reload", headers=JSON)
                if res.status_code != 200:
                    error = f"HTTP {res.status_code} {res.text[:200]}"
                while error is None:  # every worker on the new version
                    got = (await http.get(f"{url}{API}/projects/{pid}")).json()
                    versions = [w["version"] for w in got["workers"]]
                    if all(v == new for v in versions):
                        break
                    if stop.is_set() or time.perf_counter() - at > 600:
                        error = (f"not every worker on the new version {new} after "
                                 f"{time.perf_counter() - at:.0f} s: {versions}")
                    await asyncio.sleep(0.2)
            except (httpx.HTTPError, OSError) as exc:
                error = f"{type(exc).__name__} {exc}"
            soak.reloads.append((at - t0, time.perf_counter() - at, error))


async def _sampler(url: str, pid: str, supervisor: int, every: float, stop: asyncio.Event,
                   t0: float, soak: Soak) -> None:
    while True:
        pids = await asyncio.to_thread(worker_pids, url, pid)
        now = time.perf_counter() - t0
        soak.rss.append((now, {p: mib for p in [supervisor, *pids]
                               if (mib := rss_mib(p)) is not None}))
        try:
            await asyncio.wait_for(stop.wait(), every)
            return
        except TimeoutError:
            pass


async def _run(url: str, supervisor: int, folder: Path, records: list, queue_size: int,
               minutes: float, clients: int, store: SoakStore) -> Soak:
    seconds = minutes * 60
    soak = Soak([], Counter(), [], [], seconds)
    base = f"{url}{API}/projects/{folder.name}"
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        stop = asyncio.Event()  # the warm-up: the same load, its calls not counted
        t0 = time.perf_counter()
        warm = Soak([], Counter(), [], [], seconds)
        tasks = [asyncio.create_task(_client(http, base, n + clients, records, queue_size,
                                             stop, t0, warm)) for n in range(clients)]
        await asyncio.sleep(min(60.0, seconds / 10))
        stop.set()
        await asyncio.gather(*tasks)
        soak.warm_up = (len(warm.calls), sum(c.status != 200 for c in warm.calls))
        soak.acked += warm.acked
        stop = asyncio.Event()
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(_client(http, base, n, records, queue_size, stop, t0,
                                             soak)) for n in range(clients)]
        tasks.append(asyncio.create_task(_reloads(url, folder, seconds / 6, seconds, stop, t0,
                                                    soak)))
        tasks.append(asyncio.create_task(soak_store.outages(store, seconds, stop, t0,
                                                              soak.outages)))
        tasks.append(asyncio.create_task(soak_store.health(url, min(60.0, seconds / 20), stop,
                                                             t0, soak.health)))
        # the last sample at the end, after the load stopped: `stop` wakes it
        sampler = asyncio.create_task(_sampler(url, folder.name, supervisor,
                                               min(60.0, seconds / 10), stop, t0, soak))
        await asyncio.sleep(seconds)
        stop.set()
        soak.seconds = time.perf_counter() - t0
        await asyncio.gather(*tasks)  # a reload going on ends first, an outage is given back
        await sampler
    soak_store.settle(soak.calls, soak.outages)
    return soak


def run_soak(project: Path, work: Path, records: list, queue_file: Path, queue_size: int,
             minutes: float, store: SoakStore, clients: int = 16, workers: int = 2) -> Soak:
    """Serve a hard-linked copy of ``project`` (the original is never written: feedback goes
    to ``store``) with ``--allow-learn --queue QUEUE_FILE`` and soak it."""
    import shutil

    folder = work / "soak" / project.name
    shutil.rmtree(folder.parent, ignore_errors=True)
    folder.parent.mkdir(parents=True)
    linked_copy(project, folder)
    opts = argparse.Namespace(tmp=work / "soak", mmap=False,
                              serve_arg=["--allow-learn", "--queue", str(queue_file)])
    with server(folder, workers, opts, work / "soak" / "serve.log", store.url) as (url, proc,
                                                                                 _):
        soak = asyncio.run(_run(url, proc.pid, folder, records, queue_size, minutes,
                                clients, store))
    with open(work / "soak" / "calls.tsv", "w", encoding="utf-8") as fh:  # for a closer look
        fh.write("kind\tstart_s\tend_s\tstatus\n")
        fh.writelines(f"{c.kind}\t{c.start:.3f}\t{c.end:.3f}\t{c.status}\n" for c in soak.calls)
        fh.writelines(f"reload\t{a:.3f}\t{a + t:.3f}\t{e or 200}\n" for a, t, e in soak.reloads)
        fh.writelines(f"store {o.kind}\t{o.start:.3f}\t{o.back:.3f}\t{o.note}\n"
                      for o in soak.outages)
    with open(work / "soak" / "rss.tsv", "w", encoding="utf-8") as fh:  # supervisor first
        fh.writelines(f"{t:.1f}\t" + "\t".join(f"{p}:{m:.0f}" for p, m in x.items()) + "\n"
                      for t, x in soak.rss)
    return soak


def scenario_soak(ctx, rng: random.Random) -> None:
    """This module's soak for ``--soak-minutes`` on ``--soak-project`` (2 workers,
    ``--soak-clients``), single and batch suggests and the queue from the dev sample, the
    feedback store a `SoakStore` in the work folder; `soak_report.print_soak` prints it."""
    from benchmarks._common import seeded_sample
    from benchmarks.faults.soak_report import print_soak
    from tests.faultkit import Unavailable

    if not (ctx.soak_project / "model").exists():
        print(f"soak: no trained project at {ctx.soak_project}: skipped (--soak-project)")
        return
    records = [r for r in ctx.dev if r.title.strip()]
    queue = seeded_sample(records, 200, rng.randrange(1 << 30))
    queue_file = write_jsonl(ctx.work / "soak-queue.jsonl", queue)
    try:
        store = SoakStore(ctx.work / "soak-disk")
    except Unavailable as exc:
        print(f"soak: skipped: {exc}")
        return
    with store:
        soak = run_soak(ctx.soak_project, ctx.work, records, queue_file, len(queue),
                        ctx.soak_minutes, store, ctx.soak_clients)
        stored = store.stored_requests()
    print_soak(soak, stored, ctx.soak_project, ctx.soak_clients, os.getloadavg()[0])
