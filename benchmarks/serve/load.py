#!/usr/bin/env python
"""Issue 12 benchmark: `tagalign serve` under concurrent load while /learn writes feedback.

Starts `tagalign serve PROJECT` as its own process on a free localhost port, with the
feedback store in a fresh temporary SQLite file (the project's own store stays clean).
Then 50 concurrent asyncio clients send 1,000 suggest requests (tagalign's API) and,
spread among them, 100 learn requests that each write one record's accepted subjects.
Afterwards it counts the feedback rows in the database: every row a learn request was
acknowledged for must be there. Bounded: a fixed number of requests, 120 s timeout each.

Without --project it first trains a small hybrid project (omikuji + TF-IDF neighbours +
lexical, 1,500 train records sampled with the seed) into runs/load-project/ (reused).
Records for the requests: dev records sampled with the seed.

    python -m benchmarks.serve.load [--project DIR] [--requests 1000] [--clients 50] [--learn 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks._common import add_data_args, serve
from tagalign.feedback import FeedbackStore, sqlite_url
from tagalign.project import Project, ProjectError
from tagalign.records import read_records
from tests.loadtest import run_load

ROOT = Path(__file__).resolve().parents[2]
SMALL_HYBRID = {"sources": ["omikuji", "tfidf_knn", "lexical"], "ranker_rounds": 60,
                "holdout_fraction": 0.2}



def sample(path: Path, n: int, seed: int, vocab=None) -> list:
    recs = list(read_records(path, vocab=vocab))
    return random.Random(seed).sample(recs, min(n, len(recs)))


def small_project(args) -> Path:
    path = ROOT / "runs" / "load-project"
    try:
        if Project.load(path).is_trained:
            print(f"project: {path} (reused)")
            return path
    except ProjectError:
        pass
    from tagalign.vocab import load_vocabulary

    vocab = load_vocabulary(args.vocab)
    train = sample(args.train, 1500, args.seed, vocab)
    t0 = time.time()
    Project.create(path, vocab, "hybrid", SMALL_HYBRID, overwrite=True).train(train)
    print(f"project: {path}, hybrid {SMALL_HYBRID['sources']} trained on 1,500 train records "
          f"(seed {args.seed}) in {time.time() - t0:.0f} s")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--project", type=Path, help="A trained project (default: a small one).")
    ap.add_argument("--requests", type=int, default=1000, help="Suggest requests.")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--learn", type=int, default=100, help="Learn requests among them.")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    project = args.project or small_project(args)
    proj = Project.load(project)
    recs = sample(args.dev, 2000, args.seed, proj.vocab)
    recs = [r for r in recs if r.title.strip()][:args.requests]
    langs = Counter(r.language for r in recs)
    print(f"requests: {args.requests} suggest + {args.learn} learn from {args.clients} "
          f"concurrent clients; records: {len(recs)} dev records sampled with seed "
          f"{args.seed} ({dict(langs)}); {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")

    tmp = Path(tempfile.mkdtemp(prefix="tagalign-load-"))
    db = sqlite_url(tmp / "feedback.sqlite")
    with serve(project, "--feedback-db", db) as url:
        asyncio.run(run_load(url, project.name, recs[:20], suggest_requests=20,
                             learn_requests=0, clients=4))  # warm-up, not counted
        result = asyncio.run(run_load(url, project.name, recs, suggest_requests=args.requests,
                                      learn_requests=args.learn, clients=args.clients,
                                      learn_prefix="load"))
    present = FeedbackStore(db).count(project.name, record_prefix="load-")
    print(result.summary())
    print(f"feedback rows: committed (acknowledged) {result.rows_committed}, present after "
          f"the run {present}")
    for err in result.errors[:10]:
        print("error:", err)
    print("issue 12 asks: 1,000 suggest requests from 50 concurrent clients with learn "
          "writing at the same time; 0 errors; every committed feedback row present; p95 "
          "printed (no latency target given)")
    if result.errors or present != result.rows_committed:
        sys.exit(f"{len(result.errors)} errors; {result.rows_committed - present} rows missing")


if __name__ == "__main__":
    main()
