#!/usr/bin/env python
"""Issue 5 benchmark: single-record suggest latency and throughput of `tagalign serve`.

Starts `tagalign serve PROJECT` as a separate process on a free localhost port, sends
1,000 sequential single-record requests (p50/p95/p99 latency), then the same records from
16 concurrent clients (throughput, errors). Records: dev.jsonl.gz by default.

    python benchmarks/serve_latency.py --project runs/hybrid-full [--requests 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from _common import DATA, serve
from tagalign.records import read_records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--records", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--limit", type=int, default=10)
    args = ap.parse_args()

    recs = list(read_records(args.records, limit=args.requests))
    with serve(args.project, stop_timeout=10) as url:
        project = args.project.name
        endpoint = f"{url}/tagalign/v1/projects/{project}/suggest"

        def body(r):
            return {"title": r.title, "abstract": r.abstract, "limit": args.limit,
                    **({"language": r.language} if r.language in ("de", "en") else {})}

        with httpx.Client(timeout=60) as client:
            for r in recs[:20]:  # warm-up
                client.post(endpoint, json=body(r))
            lat, errors = [], 0
            for r in recs:
                t = time.perf_counter()
                res = client.post(endpoint, json=body(r))
                lat.append((time.perf_counter() - t) * 1000)
                errors += res.status_code != 200
        lat = np.array(lat)
        print(f"sequential: {len(lat)} requests, p50 {np.percentile(lat, 50):.1f} ms, "
              f"p95 {np.percentile(lat, 95):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, "
              f"mean {lat.mean():.1f} ms, errors {errors}")

        clients = [httpx.Client(timeout=120) for _ in range(args.clients)]

        def one(i):
            r = recs[i]
            t = time.perf_counter()
            res = clients[i % args.clients].post(endpoint, json=body(r))
            return res.status_code, (time.perf_counter() - t) * 1000

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            results = list(pool.map(one, range(len(recs))))
        wall = time.perf_counter() - t0
        conc = np.array([ms for _, ms in results])
        bad = sum(code != 200 for code, _ in results)
        print(f"{args.clients} concurrent clients: {len(results) / wall:.1f} requests/s, "
              f"p50 {np.percentile(conc, 50):.1f} ms, p95 {np.percentile(conc, 95):.1f} ms, "
              f"errors {bad}")
        if errors or bad:
            sys.exit(f"{errors + bad} requests failed")


if __name__ == "__main__":
    main()
