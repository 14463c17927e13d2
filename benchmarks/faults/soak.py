"""A soak of `tagalign serve` (issue 46, scenario 4; run by `python -m benchmarks.faults --only
soak`): ``clients`` concurrent clients send a seeded mix of requests for ``minutes``, each
waiting a seeded 0-1 s between two of its requests (a librarian's pace, not a flood):

    single suggest 45 %, batch suggest (10 records) 10 %, learn 15 % (one record, its id
    drawn from a pool of `LEARN_IDS`: a decision replaces the one stored for that id
    before, so a model that only keeps the latest stays the same size), subject search
    15 % (a prefix of a title word), review queue 15 % (where it stands, one record, or
    finishing one)

and every sixth of the run (10 minutes of an hour) a new version of the model is swapped
into the served folder and reloaded (`serve_load.new_version`: the manifest re-saved, so
the version differs; then POST …/reload until every worker serves it). Each worker's RSS is
sampled every minute (every tenth of the run when that is shorter), and the supervisor's
(with ``--workers`` it holds the preloaded models it forks workers from; a reload replaces
the workers one at a time, so a worker's RSS is followed as the workers' mean and maximum).

Reported: requests and failed ones (any answer but 200, or none; target 0), every
acknowledged learn id in the feedback store afterwards (lost: target 0), the workers' RSS
(mean, maximum) and the supervisor's at the start, at 60 % of the run and at the end, and
its growth over the last 40 % (target ≤ 5 %), each process's first and last RSS, and p95
latency of the first and the last tenth of the run after a warm-up of the same load (a
tenth of the run, at most a minute, not counted; by start time; target: the last within
20 % of the first), of the single suggests and of all requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psutil

from benchmarks.faults.common import read_lines, report, run, write_jsonl
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
    acked: set[str]  # learn ids the server acknowledged
    #: (seconds, {pid: RSS MiB}) samples of the supervisor (first) and the workers
    rss: list[tuple[float, dict[int, float]]]
    reloads: list[tuple[float, float, str | None]]  # (at s, took s, error)
    seconds: float
    warm_up: tuple[int, int] = (0, 0)  # requests before the clock started, failed ones


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
            soak.acked.add(rid)
        await asyncio.sleep(rng.uniform(0.0, 1.0))


async def _reloads(url: str, folder: Path, every: float, end: float, stop: asyncio.Event,
                   t0: float, soak: Soak) -> None:
    """A new version and a reload at each multiple of ``every`` seconds (one still going on
    at the next: that one is left out), none later than ``end`` minus half of that."""
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
                    if all(w["version"] == new for w in got["workers"]):
                        break
                    if time.perf_counter() - at > 600:
                        error = "not every worker on the new version after 600 s"
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
               minutes: float, clients: int) -> Soak:
    seconds = minutes * 60
    soak = Soak([], set(), [], [], seconds)
    base = f"{url}{API}/projects/{folder.name}"
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        stop = asyncio.Event()  # the warm-up: the same load, its calls not counted
        t0 = time.perf_counter()
        warm = Soak([], set(), [], [], seconds)
        tasks = [asyncio.create_task(_client(http, base, n + clients, records, queue_size,
                                             stop, t0, warm)) for n in range(clients)]
        await asyncio.sleep(min(60.0, seconds / 10))
        stop.set()
        await asyncio.gather(*tasks)
        soak.warm_up = (len(warm.calls), sum(c.status != 200 for c in warm.calls))
        soak.acked |= warm.acked
        stop = asyncio.Event()
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(_client(http, base, n, records, queue_size, stop, t0,
                                             soak)) for n in range(clients)]
        tasks.append(asyncio.create_task(_reloads(url, folder, seconds / 6, seconds, stop, t0,
                                                    soak)))
        # the last sample at the end, after the load stopped: `stop` wakes it
        sampler = asyncio.create_task(_sampler(url, folder.name, supervisor,
                                               min(60.0, seconds / 10), stop, t0, soak))
        await asyncio.sleep(seconds)
        stop.set()
        soak.seconds = time.perf_counter() - t0
        await asyncio.gather(*tasks)  # a reload going on ends first
        await sampler
    return soak


def run_soak(project: Path, work: Path, records: list, queue_file: Path, queue_size: int,
             minutes: float, clients: int = 16, workers: int = 2) -> tuple[Soak, Path]:
    """Serve a hard-linked copy of ``project`` (the original is never written: feedback goes
    to a store in ``work``) with ``--allow-learn --queue QUEUE_FILE`` and soak it; the run
    and the feedback store's URL."""
    import shutil

    folder = work / "soak" / project.name
    shutil.rmtree(folder.parent, ignore_errors=True)
    folder.parent.mkdir(parents=True)
    linked_copy(project, folder)
    opts = argparse.Namespace(tmp=work / "soak", mmap=False,
                              serve_arg=["--allow-learn", "--queue", str(queue_file)])
    with server(folder, workers, opts, work / "soak" / "serve.log") as (url, proc, _):
        soak = asyncio.run(_run(url, proc.pid, folder, records, queue_size, minutes,
                                clients))
    with open(work / "soak" / "calls.tsv", "w", encoding="utf-8") as fh:  # for a closer look
        fh.write("kind\tstart_s\tend_s\tstatus\n")
        fh.writelines(f"{c.kind}\t{c.start:.3f}\t{c.end:.3f}\t{c.status}\n" for c in soak.calls)
        fh.writelines(f"reload\t{a:.3f}\t{a + t:.3f}\t{e or 200}\n" for a, t, e in soak.reloads)
    with open(work / "soak" / "rss.tsv", "w", encoding="utf-8") as fh:  # supervisor first
        fh.writelines(f"{t:.1f}\t" + "\t".join(f"{p}:{m:.0f}" for p, m in x.items()) + "\n"
                      for t, x in soak.rss)
    return soak, work / "soak" / "feedback.sqlite"


def p95(calls: list[Call]) -> int | None:
    ms = [(c.end - c.start) * 1000 for c in calls if c.status == 200]
    return round(float(np.percentile(ms, 95))) if ms else None


def workers_rss(soak: Soak, workers: int) -> list[tuple[float, float, float]]:
    """(seconds, mean, max) RSS of the workers at each sample with ``workers`` of them (a
    reload replaces them one at a time: a sample taken meanwhile may list one more)."""
    return [(t, float(np.mean(w)), max(w)) for t, sample in soak.rss
            if len(w := list(sample.values())[1:]) == workers]


def growth(samples: list[tuple[float, float]], d: float) -> tuple:
    """(MiB at the start, at 60 % of ``d`` seconds, at the end, growth % over the last
    40 %) of ``(seconds, MiB)`` samples."""
    mid = min(samples, key=lambda s: abs(s[0] - 0.6 * d))[1]
    end = samples[-1][1]
    return round(samples[0][1]), round(mid), round(end), round(100 * (end - mid) / mid, 1)


def processes(soak: Soak) -> dict[int, tuple[float, float, float, float]]:
    """Each process sampled: (first seen s, its RSS then, last seen s, its RSS then)."""
    out: dict[int, tuple[float, float, float, float]] = {}
    for t, sample in soak.rss:
        for pid, mib in sample.items():
            first = out.get(pid, (t, mib))[:2]
            out[pid] = (*first, t, mib)
    return out


def summary(soak: Soak, workers: int = 2) -> dict:
    """The figures the module's docstring names."""
    d = soak.seconds
    first = [c for c in soak.calls if c.start < 0.1 * d]
    last = [c for c in soak.calls if c.start >= 0.9 * d]
    failed = [c for c in soak.calls if c.status != 200]
    per_worker = workers_rss(soak, workers)
    rss = {"supervisor": growth([(t, next(iter(x.values()))) for t, x in soak.rss], d),
           "workers' mean": growth([(t, m) for t, m, _ in per_worker], d),
           "workers' max": growth([(t, m) for t, _, m in per_worker], d)}
    return {
        "minutes": round(d / 60, 1), "requests": len(soak.calls),
        "by_kind": dict(Counter(c.kind for c in soak.calls)), "failed": len(failed),
        "failed_by_kind": dict(Counter(f"{c.kind} {c.status}" for c in failed)),
        "failed_examples": [c.error for c in failed[:5]],
        "reloads": len(soak.reloads), "reloads_failed": sum(e is not None for *_, e in
                                                           soak.reloads),
        "reload_s": [round(s, 1) for _, s, _ in soak.reloads],
        "reload_errors": [e for *_, e in soak.reloads if e is not None][:3],
        "warm_up": soak.warm_up,
        "rss": rss, "processes": processes(soak),
        "p95_suggest_ms": (p95([c for c in first if c.kind == "suggest"]),
                           p95([c for c in last if c.kind == "suggest"])),
        "p95_all_ms": (p95(first), p95(last)),
    }


__all__ = ["Call", "Soak", "run_soak", "summary"]


def scenario_soak(ctx, rng: random.Random) -> None:
    """`benchmarks/faults/soak.py` for ``--soak-minutes`` on ``--soak-project`` (2 workers, 16
    clients), single and batch suggests and the queue from the dev sample."""
    from benchmarks._common import seeded_sample
    from benchmarks.soak import run_soak, summary

    if not (ctx.soak_project / "model").exists():
        print(f"soak: no trained project at {ctx.soak_project}: skipped (--soak-project)")
        return
    records = [r for r in ctx.dev if r.title.strip()]
    queue = seeded_sample(records, 200, rng.randrange(1 << 30))
    queue_file = write_jsonl(ctx.work / "soak-queue.jsonl", queue)
    soak, db = run_soak(ctx.soak_project, ctx.work, records, queue_file, len(queue),
                        ctx.soak_minutes)
    out = ctx.work / "soak-feedback.jsonl"
    run("feedback", "export", str(db), "--out", str(out))
    stored = {r["id"] for r in read_lines(out)}
    lost = len(soak.acked - stored)
    s = summary(soak)
    print(f"  soak of {ctx.soak_project} ({s['minutes']} min, 16 clients, 2 workers, "
          f"load {os.getloadavg()[0]:.1f} at the end): {s['requests']} requests "
          f"{s['by_kind']}, {s['failed']} failed {s['failed_by_kind']} (target 0)", flush=True)
    for err in s["failed_examples"]:
        print(f"    failed: {err}")
    for what, (start, mid, end, growth) in s["rss"].items():
        print(f"  {what} RSS: {start} MiB at the start, {mid} at 60 %, {end} at the end: "
              f"{growth:+.1f} % over the last 40 % (target ≤ 5 %)")
    print("  each process (seconds: RSS MiB first and last seen): " + "; ".join(
        f"{pid} {a:.0f} s: {ra:.0f} -> {b:.0f} s: {rb:.0f}"
        for pid, (a, ra, b, rb) in s["processes"].items()))
    (f_s, l_s), (f_a, l_a) = s["p95_suggest_ms"], s["p95_all_ms"]
    print(f"  p95 first / last tenth: single suggest {f_s} / {l_s} ms, all requests "
          f"{f_a} / {l_a} ms (target: last within 20 % of first)", flush=True)
    print(f"  reloads {s['reloads']} ({s['reloads_failed']} failed {s['reload_errors']}), "
          f"seconds {s['reload_s']}; warm-up (not counted): {s['warm_up'][0]} requests, "
          f"{s['warm_up'][1]} failed; learn ids acknowledged {len(soak.acked)}, not in the store "
          f"{lost}", flush=True)
    report("soak", s["reloads"], s["reloads"] - s["reloads_failed"], lost,
           requests=s["requests"], failed=s["failed"],
           workers_rss_growth_pct=s["rss"]["workers' max"][3],
           p95_suggest_ms=f"{f_s}->{l_s}")
