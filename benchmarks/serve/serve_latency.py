#!/usr/bin/env python
"""Issue 5 benchmark: single-record suggest latency and throughput of `tagalign serve`,
and (issue 11) its memory, loaded normally or memory-mapped (``--mmap``).

Starts `tagalign serve PROJECT` as a separate process on a free localhost port (feedback
in a temporary SQLite file, so the project folder is not written), sends ``--requests``
sequential single-record requests — dev records sampled with ``--seed`` — (p50/p95/p99
latency; the first 20 apart, as a mapped project reads its pages on first use), then the
same records from ``--clients`` concurrent clients (throughput, errors; 0 skips it). The
server's resident memory (RSS, with its anonymous and file-mapped parts) is printed after
the load and after the sequential requests. ``--servers 2`` starts a second server on the
same project and sends it the same requests, then prints both servers' proportional share
of memory (PSS: a page both map counts half in each), the physical memory they use together.

    python -m benchmarks.serve.serve_latency --project runs/hybrid-full [--requests 1000]
    python -m benchmarks.serve.serve_latency --project P --requests 200 --warmup 0 \
        --clients 0 --mmap

``--train-records 3000`` first trains (or reuses) a default hybrid on that many train records
sampled with ``--train-seed`` (issue 23: single-record latency of a small project, the
figure first measured at 13.4 ms p95):

    python -m benchmarks.serve.serve_latency --train-records 3000 --requests 300 --clients 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from benchmarks._common import DATA, add_data_args, process_memory_mib, serve_process
from tagalign.records import read_records

RUNS = Path(__file__).resolve().parents[2] / "runs" / "serve-latency"


def trained_project(args) -> Path:
    """A default hybrid on ``--train-records`` train records sampled with ``--train-seed``,
    trained once into runs/serve-latency/ and reused by later runs."""
    from tagalign.project import Project
    from tagalign.vocab import load_vocabulary

    path = args.project or RUNS / f"hybrid-{args.train_records}-seed{args.train_seed}"
    if (path / "model").exists():
        print(f"project: reusing {path}", file=sys.stderr)
        return path
    pool = list(read_records(args.train))
    idx = np.random.default_rng(args.train_seed).choice(len(pool), args.train_records,
                                                        replace=False)
    vocab = load_vocabulary(args.vocab)
    project = Project.create(path, vocab, "hybrid", {})
    t0 = time.perf_counter()
    project.train([pool[i] for i in sorted(idx)])
    print(f"project: hybrid trained on {args.train_records} records (seed "
          f"{args.train_seed}) in {time.perf_counter() - t0:.0f} s → {path}", file=sys.stderr)
    return path


def drop_page_cache(folder: Path) -> int:
    """Ask the kernel to drop the cached pages of the project's files (only those: other
    work on the machine keeps its cache), so the first reads come from disk; bytes asked."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                total += path.stat().st_size
            finally:
                os.close(fd)
    return total


def fmt(mem: dict[str, float]) -> str:
    return f"RSS {mem['rss']:,.0f} MiB (anon {mem['anon']:,.0f}, file-mapped {mem['file']:,.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path,
                    help="A trained project (with --train-records: where to train one).")
    ap.add_argument("--train-records", type=int,
                    help="Train a default hybrid on this many seeded train records first.")
    ap.add_argument("--train-seed", type=int, default=0, help="Seed of the train sample.")
    add_data_args(ap)
    ap.add_argument("--records", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz",
                    help="Records to send (default: dev).")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0, help="Seed of the record sample.")
    ap.add_argument("--warmup", type=int, default=20,
                    help="Requests sent (with the first sampled records) before measuring.")
    ap.add_argument("--clients", type=int, default=16, help="Concurrent clients; 0: none.")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--mmap", action="store_true", help="Serve with --mmap (read-only).")
    ap.add_argument("--cold", action="store_true",
                    help="Drop the project files from the page cache before the server starts.")
    ap.add_argument("--servers", type=int, default=1,
                    help="Servers of the same project (memory shared between them; 1 or 2).")
    ap.add_argument("--json", type=Path, help="Append the figures as one JSON line here.")
    args = ap.parse_args()
    if args.train_records:
        args.project = trained_project(args)
    elif args.project is None:
        ap.error("give --project, or --train-records to train one")

    pool = list(read_records(args.records))
    idx = np.random.default_rng(args.seed).choice(len(pool), min(args.requests, len(pool)),
                                                  replace=False)
    recs = [pool[i] for i in idx]
    kinds = Counter(f"{r.language}/{r.type}" for r in recs)
    print(f"records: {len(recs)} of {len(pool)} in {args.records.name}, sampled with seed "
          f"{args.seed}: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    print(f"server: {'--mmap' if args.mmap else 'normal load'}; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f} at the start")
    if args.cold:
        print(f"page cache of {drop_page_cache(args.project) / 2**20:,.0f} MiB of project "
              "files dropped")
    extra = ["--mmap"] if args.mmap else []
    db = Path(tempfile.mkdtemp(prefix="tagalign-latency-")) / "feedback.sqlite"
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        url, server = stack.enter_context(serve_process(
            args.project, "--feedback-db", f"sqlite:///{db}", *extra, stop_timeout=10))
        load_s = time.perf_counter() - t0
        mem_load = process_memory_mib(server.pid)
        print(f"after load: {fmt(mem_load)}")
        project = args.project.name
        endpoint = f"{url}/tagalign/v1/projects/{project}/suggest"

        def body(r):
            return {"title": r.title, "abstract": r.abstract, "limit": args.limit,
                    **({"language": r.language} if r.language in ("de", "en") else {})}

        with httpx.Client(timeout=60) as client:
            for r in recs[:args.warmup]:
                client.post(endpoint, json=body(r))
            lat, errors = [], 0
            for r in recs:
                t = time.perf_counter()
                res = client.post(endpoint, json=body(r))
                lat.append((time.perf_counter() - t) * 1000)
                errors += res.status_code != 200
        mem_queries = process_memory_mib(server.pid)
        lat = np.array(lat)
        print(f"sequential: {len(lat)} requests, p50 {np.percentile(lat, 50):.1f} ms, "
              f"p95 {np.percentile(lat, 95):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, "
              f"mean {lat.mean():.1f} ms (first 20: mean {lat[:20].mean():.1f} ms, "
              f"the rest {lat[20:].mean() if len(lat) > 20 else float('nan'):.1f} ms), "
              f"errors {errors}")
        print(f"after {len(lat)} requests: {fmt(mem_queries)}")
        figures = {"project": str(args.project), "mmap": args.mmap, "cold": args.cold,
                   "requests": len(lat), "seed": args.seed, "warmup": args.warmup,
                   "load_s": round(load_s, 1), "rss_load": mem_load,
                   "rss_queries": mem_queries,
                   "p50_ms": round(float(np.percentile(lat, 50)), 1),
                   "p95_ms": round(float(np.percentile(lat, 95)), 1),
                   "first20_mean_ms": round(float(lat[:20].mean()), 1),
                   "loadavg": os.getloadavg()[0]}

        if args.servers > 1:  # the same requests to each further server, then all measured
            pids = [server.pid]
            for _ in range(args.servers - 1):
                url2, server2 = stack.enter_context(serve_process(
                    args.project, "--feedback-db", f"sqlite:///{db}", *extra, stop_timeout=10))
                with httpx.Client(timeout=60) as client:
                    for r in recs:
                        client.post(f"{url2}/tagalign/v1/projects/{project}/suggest",
                                    json=body(r))
                pids.append(server2.pid)
            mems = [process_memory_mib(pid) for pid in pids]
            figures["servers"] = mems
            print(f"{len(mems)} servers after {len(recs)} requests each: " + "; ".join(
                f"{fmt(m)}, PSS {m['pss']:,.0f} MiB" for m in mems)
                + f"; together PSS {sum(m['pss'] for m in mems):,.0f} MiB")

        bad = 0
        if args.clients:
            clients = [httpx.Client(timeout=120) for _ in range(args.clients)]

            def one(i):
                r = recs[i]
                t = time.perf_counter()
                res = clients[i % args.clients].post(endpoint, json=body(r))
                return res.status_code, (time.perf_counter() - t) * 1000

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as ex:
                results = list(ex.map(one, range(len(recs))))
            wall = time.perf_counter() - t0
            conc = np.array([ms for _, ms in results])
            bad = sum(code != 200 for code, _ in results)
            print(f"{args.clients} concurrent clients: {len(results) / wall:.1f} requests/s, "
                  f"p50 {np.percentile(conc, 50):.1f} ms, p95 {np.percentile(conc, 95):.1f} ms, "
                  f"errors {bad}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        with args.json.open("a") as fh:
            fh.write(json.dumps(figures) + "\n")
    if errors or bad:
        sys.exit(f"{errors + bad} requests failed")


if __name__ == "__main__":
    main()
