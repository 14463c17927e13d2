#!/usr/bin/env python
"""Issue 31 benchmark: `tagalign serve --workers N`, a model reload under load, a SIGTERM
under load. Each part starts `tagalign serve PROJECT` as its own process on a free
localhost port (feedback into a throwaway SQLite file: the project's own store stays
clean) and sends single-record suggests (tagalign's API, limit 10) from ``--clients``
concurrent asyncio clients (`tests/loadtest.py`), cycling through ``--limit-dev`` dev
records sampled with ``--seed`` (the sample's languages and types are printed).

1. **throughput** — ``--requests`` suggests against ``--workers 1`` and ``--workers N``
   side by side (default threads: the cores shared out among the workers); requests per
   second, p50 and p95, and the ratio N/1 (issue 31's target: ≥ 1.5× with 2 workers).
2. **memory** — after each throughput run (the pages the requests touch are in): the
   server's processes (the workers and, with several, the supervisor, which holds the
   models the workers share) summed: RSS, PSS (a page shared by n processes counts 1/n,
   so the sum is the memory the server really takes) and USS (pages only one process
   holds), from psutil, and the ratio N/1 (target: ≤ 1.3× with ``--mmap``, which both
   runs use unless ``--no-mmap``). Summed RSS counts a shared page once per process that
   maps it; PSS is the one that adds up.
3. **reload** — ``--reload-seconds`` of load against N workers serving a hard-linked copy
   of the project; a quarter of the way in, a new version of the model is swapped into
   the folder the way ``tagalign download --force`` does (`tagalign.shipping.swap`): the
   same files with the manifest re-saved with a marker, so its version (the manifest's
   hash) differs. Then ``POST …/reload``. Counted: failed requests (target 0), which
   version answered (``X-Model-Version``) before and after, and answers from the old
   version that started after every worker reported the new one (must be 0); the workers'
   peak memory while both models were loaded.
4. **sigterm** — load against N workers for ``--sigterm-after`` seconds, then the clients
   start no new request and the supervisor gets SIGTERM: the requests in flight must all
   succeed (target: 0 failed), the server must exit 0, and refuse connections after.

    python -m benchmarks.serve.serve_load --project runs/full/project [--clients 16]
        [--requests 2000] [--workers 2] [--reload-seconds 60] [--sigterm-after 10]
        [--parts throughput,memory,reload,sigterm] [--serve-arg=--no-compile-ranker]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil

from benchmarks._common import DATA, free_port, seeded_sample
from tagalign.io import read_json, write_json_atomic
from tagalign.project import model_version
from tagalign.records import read_records
from tagalign.shipping.checks import FEEDBACK_FILES
from tagalign.shipping.swap import incoming, replace
from tests.loadtest import Answer, run_lean, run_load, run_until

PARTS = ("throughput", "memory", "reload", "sigterm")


@contextlib.contextmanager
def server(folder: Path, workers: int, args, log: Path, store: str | None = None
           ) -> Iterator[tuple[str, psutil.Popen, list[int]]]:
    """`tagalign serve FOLDER --workers N` until the block ends: its URL, process and the
    worker pids, once every worker answers (feedback into ``store``, else a throwaway
    SQLite file)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = store or f"sqlite:///{args.tmp / 'feedback.sqlite'}"
    cmd = ["tagalign.cli.main", "serve", str(folder), "--port", str(port), "--workers",
           str(workers), "--feedback-db", store,
           *(["--mmap"] if args.mmap else []), *args.serve_arg]
    with open(log, "ab") as out:
        proc = psutil.Popen([sys.executable, "-m", *cmd], stdout=out, stderr=out)
    t0 = time.time()
    try:
        while True:
            try:
                res = httpx.get(f"{url}/tagalign/v1/projects/{folder.name}", timeout=5)
                if res.status_code == 200 and len(res.json()["workers"]) == workers:
                    pids = [w["pid"] for w in res.json()["workers"]]
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.time() - t0 > 900:
                raise SystemExit(f"server did not start; see {log}")
            time.sleep(0.3)
        print(f"  {workers} worker(s) up after {time.time() - t0:.1f} s (load {load():.1f})")
        yield url, proc, pids
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(120)


def load() -> float:
    return os.getloadavg()[0]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used so far."""
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def tree_memory_mib(proc: psutil.Process) -> dict[str, float]:
    """`memory_mib` of the server's processes now: the supervisor and its workers (a model
    swap replaces the workers: their pids change)."""
    pids = [proc.pid]
    with contextlib.suppress(psutil.NoSuchProcess):
        pids += [c.pid for c in proc.children(recursive=True)]
    return memory_mib(pids)


def memory_mib(pids: list[int]) -> dict[str, float]:
    """Summed RSS, PSS and USS of ``pids`` (MiB)."""
    out = Counter()
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.NoSuchProcess:  # ended meanwhile (a worker replaced in a swap)
            continue
        out.update({"rss": info.rss / 2**20, "pss": info.pss / 2**20,
                    "uss": info.uss / 2**20})
    return dict(out)


def linked_copy(src: Path, dst: Path) -> None:
    """``src`` as hard links (no disk space, instant; copies across file systems), without
    the feedback store (opened by a server, SQLite would write into the original's file)
    and ``work/``."""
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link,
                    ignore=shutil.ignore_patterns(*FEEDBACK_FILES, "work"))


def new_version(folder: Path) -> str:
    """The folder's model again, its manifest re-saved with a marker (a new file: the
    hard links of the others stay), swapped in as `tagalign download --force` does."""
    linked_copy(folder, incoming(folder))
    manifest = incoming(folder) / "model" / "recipe.json"
    write_json_atomic(manifest, {**read_json(manifest), "reload_marker": time.time()})
    replace(folder)
    return model_version(folder)["version"]


def percentiles(answers: list[Answer]) -> str:
    ms = [(a.end - a.start) * 1000 for a in answers if a.status == 200]
    if not ms:
        return "no answers"
    return f"p50 {np.percentile(ms, 50):.1f} ms, p95 {np.percentile(ms, 95):.1f} ms"


# -- the parts ---------------------------------------------------------------------------
def throughput(args, recs, pid: str) -> None:
    rows, busy = {}, {}
    for workers in sorted({1, args.workers}):
        with server(args.project, workers, args, args.tmp / "serve.log") as (url, proc, pids):
            asyncio.run(run_load(url, pid, recs, suggest_requests=max(50, 10 * workers),
                                 learn_requests=0, clients=args.clients))  # warm-up
            start_load = load()
            # how busy the cores were: the server's CPU seconds and the load generator's
            # (this process) per second of the run; 2.0 is both cores of this machine
            per0 = [cpu_seconds([p]) for p in pids]
            cpu0, own0, t0 = cpu_seconds(pids), time.process_time(), time.perf_counter()
            if args.client == "lean":
                res = asyncio.run(run_lean(url, pid, recs, suggest_requests=args.requests,
                                           clients=args.clients))
            else:
                res = asyncio.run(run_load(url, pid, recs, suggest_requests=args.requests,
                                           learn_requests=0, clients=args.clients))
            wall = time.perf_counter() - t0
            busy[workers] = ((cpu_seconds(pids) - cpu0) / wall,
                             (time.process_time() - own0) / wall,
                             [(cpu_seconds([p]) - c) / wall for p, c in zip(pids, per0,
                                                                            strict=True)])
            rows[workers] = (len(res.suggest_ms) / res.wall_s, res.percentile(50),
                             res.percentile(95), len(res.errors), start_load,
                             # the supervisor too: it holds the models workers share
                             memory_mib(sorted({*pids, proc.pid})))
    print(f"\n{'workers':>7} {'req/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'errors':>6} "
          f"{'load':>5}" + (f" {'RSS MiB':>8} {'PSS MiB':>8} {'USS MiB':>8}"
                            if "memory" in args.parts else ""))
    for workers, (rate, p50, p95, errors, start_load, mem) in rows.items():
        print(f"{workers:>7} {rate:>8.1f} {p50:>7.1f} {p95:>7.1f} {errors:>6} "
              f"{start_load:>5.1f}" + (f" {mem['rss']:>8.0f} {mem['pss']:>8.0f} "
                                       f"{mem['uss']:>8.0f}" if "memory" in args.parts
                                       else ""))
    for workers, (server_cores, client_cores, each) in busy.items():
        print(f"  {workers} worker(s): server busy {server_cores:.2f} cores "
              f"({' + '.join(f'{c:.2f}' for c in each)} by worker), load generator "
              f"{client_cores:.2f} cores (of {os.cpu_count()})")
    if len(rows) == 2:
        one, many = rows[1], rows[args.workers]
        print(f"throughput {args.workers} workers / 1: {many[0] / one[0]:.2f}× "
              "(target ≥ 1.5× with 2)")
        if "memory" in args.parts:
            ratio = {k: many[5][k] / one[5][k] for k in ("rss", "pss", "uss")}
            print(f"memory {args.workers} workers / 1 ({'--mmap' if args.mmap else 'no mmap'}):"
                  f" RSS {ratio['rss']:.2f}×, PSS {ratio['pss']:.2f}×, USS {ratio['uss']:.2f}×"
                  " (target ≤ 1.3× with 2 and --mmap)")


def reload_under_load(args, recs, pid: str) -> None:
    folder = Path(tempfile.mkdtemp(dir=args.work_dir, prefix=".serve-load-")) / pid
    linked_copy(args.project, folder)
    try:
        with server(folder, args.workers, args, args.tmp / "serve.log") as (url, proc, _):
            old = model_version(folder)["version"]
            peak: dict[str, float] = {}
            sampling = threading.Event()

            def sample() -> None:  # the server's memory while two models are loaded
                while not sampling.is_set():
                    for key, value in tree_memory_mib(proc).items():
                        peak[key] = max(peak.get(key, 0.0), value)
                    sampling.wait(0.5)

            async def scenario() -> tuple[list[Answer], dict, float, float]:
                stop = asyncio.Event()
                task = asyncio.create_task(run_until(url, pid, recs, stop,
                                                     clients=args.clients))
                await asyncio.sleep(args.reload_seconds / 4)
                before = tree_memory_mib(proc)
                watcher = threading.Thread(target=sample, daemon=True)
                watcher.start()
                new = await asyncio.to_thread(new_version, folder)
                async with httpx.AsyncClient(timeout=900) as http:
                    t0 = time.perf_counter()
                    answer = (await http.post(f"{url}/tagalign/v1/projects/{pid}/reload",
                                              headers={"Content-Type": "application/json"}
                                              )).json()
                    while True:  # every worker on the new version
                        got = (await http.get(f"{url}/tagalign/v1/projects/{pid}")).json()
                        if all(w["version"] == new for w in got["workers"]):
                            break
                        await asyncio.sleep(0.1)
                    t_all = time.perf_counter()
                print(f"  reload answered: {answer}")
                print(f"  every worker on {new} {t_all - t0:.1f} s after the POST; memory "
                      f"before {before['rss']:.0f} MiB RSS / {before['pss']:.0f} MiB PSS")
                await asyncio.sleep(max(0.0, args.reload_seconds * 3 / 4 - (t_all - t0)))
                stop.set()
                return await task, before, t0, t_all

            answers, before, t0, t_all = asyncio.run(scenario())
            sampling.set()
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    failed = [a for a in answers if a.status != 200]
    stale = [a for a in answers if a.start > t_all and a.version == old]
    during = [a for a in answers if a.start < t_all and a.end > t0]
    print(f"\nreload under load ({args.workers} workers, {args.clients} clients, "
          f"{args.reload_seconds:.0f} s): {len(answers)} requests, {len(failed)} failed "
          "(target 0)")
    print(f"  answered by version: {dict(Counter(a.version for a in answers))}; requests "
          f"running while the reload went on: {len(during)} ({percentiles(during)}); "
          f"old version after every worker had the new one: {len(stale)} (must be 0)")
    print(f"  latency over the whole run: {percentiles(answers)}")
    print(f"  server's peak memory while reloading: {peak.get('rss', 0):.0f} MiB RSS, "
          f"{peak.get('pss', 0):.0f} MiB PSS (before: {before['rss']:.0f} / "
          f"{before['pss']:.0f})")
    for a in failed[:10]:
        print(f"  failed: {a.status} {a.error}")


def sigterm_under_load(args, recs, pid: str) -> None:
    with server(args.project, args.workers, args, args.tmp / "serve.log") as (url, proc, _):
        port = int(url.rsplit(":", 1)[1])

        async def scenario() -> tuple[list[Answer], float]:
            stop = asyncio.Event()
            task = asyncio.create_task(run_until(url, pid, recs, stop, clients=args.clients))
            await asyncio.sleep(args.sigterm_after)
            stop.set()  # no client starts a request after this
            t_sig = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            return await task, t_sig

        answers, t_sig = asyncio.run(scenario())
        code = proc.wait(300)
        t_exit = time.perf_counter()
    try:
        socket.create_connection(("127.0.0.1", port), 2).close()
        print("  a connection was accepted after the stop!")
    except OSError:
        pass  # refused: nothing listens any more
    in_flight = [a for a in answers if a.start < t_sig < a.end]
    failed = [a for a in answers if a.status != 200]
    print(f"\nSIGTERM under load ({args.workers} workers, {args.clients} clients): "
          f"{len(answers)} requests, {len(in_flight)} in flight at the signal, "
          f"{len(failed)} failed (target 0); exit code {code}, "
          f"{t_exit - t_sig:.1f} s from the signal to the exit")
    for a in failed[:10]:
        print(f"  failed: {a.status} {a.error}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--limit-dev", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=2000, help="Suggests per throughput run.")
    ap.add_argument("--client", choices=("lean", "httpx"), default="lean",
                    help="Throughput's load generator: lean (HTTP/1.1 on asyncio streams, "
                    "little CPU taken from the server) or httpx.")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reload-seconds", type=float, default=60.0)
    ap.add_argument("--sigterm-after", type=float, default=10.0)
    ap.add_argument("--no-mmap", dest="mmap", action="store_false")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--work-dir", type=Path, help="Where the reload part's hard-linked copy "
                    "goes (default: beside the project, on its file system)")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="An option for `tagalign serve` (repeatable).")
    args = ap.parse_args()
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    args.work_dir = args.work_dir or args.project.resolve().parent
    args.work_dir.mkdir(parents=True, exist_ok=True)  # a new folder named by --work-dir
    args.tmp = Path(tempfile.mkdtemp(prefix="tagalign-serve-load-"))
    pid = args.project.name
    recs = [r for r in seeded_sample(list(read_records(args.dev)), args.limit_dev, args.seed)
            if r.title.strip()]
    print(f"project {args.project} (model {model_version(args.project)['version']}); "
          f"{len(recs)} dev records (seed {args.seed}): " + ", ".join(
              f"{k} {n}" for k, n in Counter(f"{r.language}/{r.type}" for r in recs)
              .most_common()))
    print(f"{os.cpu_count()} CPUs, load {load():.1f}; {args.clients} clients "
          f"({args.client} load generator for throughput); "
          f"{'--mmap' if args.mmap else 'no mmap'}; serve options {args.serve_arg}; "
          f"server log {args.tmp / 'serve.log'}")
    if "throughput" in args.parts or "memory" in args.parts:
        throughput(args, recs, pid)
    if "reload" in args.parts:
        reload_under_load(args, recs, pid)
    if "sigterm" in args.parts:
        sigterm_under_load(args, recs, pid)


if __name__ == "__main__":
    main()
