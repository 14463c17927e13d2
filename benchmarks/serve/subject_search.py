#!/usr/bin/env python
"""Issue 20 benchmark: subject search by label prefix on the full GND vocabulary (205k
subjects), as the web page's "add a subject" box sends it while a librarian types.

Prefixes: ``--queries`` subjects sampled with ``--seed``; of each, its German or English
label (a coin flip, German when it has no English one), cut after 1–8 characters (uniform)
— what a librarian has typed so far, in the case typed. Prints the prefix index's build
time, then p50/p95/p99/max latency (ms) of

1. ``PrefixIndex.search`` in this process (the index alone), and
2. ``GET /tagalign/v1/projects/gnd/subjects?prefix=…&limit=10`` to a real `tagalign serve`
   process on localhost (one keep-alive client, sequential requests; the project is a
   `lexical` one, which needs no training records, with the same vocabulary).

    python -m benchmarks.serve.subject_search [--queries 2000] [--seed 0] [--limit 10]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from benchmarks._common import DATA, serve_process
from tagalign.project import Project
from tagalign.vocab import Vocabulary, load_vocabulary


def prefixes(vocab: Vocabulary, n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for subject in rnd.sample(vocab.subjects, n):
        lang = "en" if "en" in subject.labels and rnd.random() < 0.5 else "de"
        label = subject.labels.get(lang) or subject.label()
        out.append(label[:rnd.randint(1, 8)])
    return out


def summary(name: str, ms: list[float]) -> None:
    a = np.asarray(ms)
    print(f"{name:<34} p50 {np.percentile(a, 50):6.2f} ms   p95 {np.percentile(a, 95):6.2f} ms"
          f"   p99 {np.percentile(a, 99):6.2f} ms   max {a.max():6.2f} ms   (n={len(a)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=10)
    args = ap.parse_args()

    vocab = load_vocabulary(args.vocab)
    queries = prefixes(vocab, args.queries, args.seed)
    lengths = [len(q) for q in queries]
    print(f"{len(vocab)} subjects; {len(queries)} prefixes (seed {args.seed}), "
          f"1–8 characters, mean {np.mean(lengths):.1f}")
    t0 = time.perf_counter()
    index = vocab.prefix_index
    print(f"prefix index: {len(index)} labels, built in {time.perf_counter() - t0:.2f} s")

    found = []
    in_process = []
    for q in queries:
        t0 = time.perf_counter()
        found.append(len(index.search(q, args.limit)))
        in_process.append((time.perf_counter() - t0) * 1e3)
    summary("PrefixIndex.search (in process)", in_process)
    print(f"  subjects found per prefix: mean {np.mean(found):.1f}, "
          f"{sum(f == args.limit for f in found)} prefixes fill the limit of {args.limit}")

    with tempfile.TemporaryDirectory() as tmp:
        project = Project.create(Path(tmp) / "gnd", vocab, "lexical")
        project.train([])
        db = f"sqlite:///{Path(tmp) / 'feedback.sqlite'}"
        with serve_process(project.path, "--feedback-db", db) as (url, _), \
                httpx.Client(base_url=f"{url}/tagalign/v1/projects/gnd") as client:
            t0 = time.perf_counter()
            first = client.get("/subjects", params={"prefix": "a", "limit": args.limit})
            first.raise_for_status()
            print(f"first HTTP query (waits for the index built at startup): "
                  f"{(time.perf_counter() - t0) * 1e3:.0f} ms")
            http = []
            for q, n in zip(queries, found, strict=True):
                t0 = time.perf_counter()
                r = client.get("/subjects", params={"prefix": q, "limit": args.limit})
                http.append((time.perf_counter() - t0) * 1e3)
                r.raise_for_status()
                assert len(r.json()["subjects"]) == n, q  # the same answer as in process
            summary("GET …/subjects (HTTP, localhost)", http)
    print("target: p95 under 50 ms")


if __name__ == "__main__":
    main()
