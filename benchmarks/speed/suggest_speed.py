#!/usr/bin/env python
"""Batch suggest speed and quality of a saved project on dev (no training).

``--jobs`` lists the process counts to time, side by side (default: 1 and `tagalign
suggest`'s default, one per core: `tagalign.project.jobs`); each run tags the records in
batches of 512, as the command does, and their answers must be equal. ``--limit-dev N``
scores a sample of N dev records drawn with ``--seed`` (never a file prefix: dev is sorted
by language and type); the sample's make-up is printed. The ranker runs compiled, as the
command's default (``--no-compile-ranker``: LightGBM).

``--set SOURCE.FIELD=VALUE`` changes a search setting after loading (`_common.set_search`),
so two runs time one model's trained settings and others side by side.

    python -m benchmarks.speed.suggest_speed --project runs/hybrid-full [--limit-dev N] [--jobs 1,0]
        [--set omikuji.beam_size=5 --set tfidf_knn.postings=20000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks._common import DATA, add_search_args, peak_rss_gb, set_search, suggestions
from tagalign.evaluate import evaluate
from tagalign.project import Project
from tagalign.project.jobs import DEFAULT_JOBS, resolve_jobs
from tagalign.records import read_records
from tagalign.runtime import Runtime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--limit-dev", type=int, help="A seeded sample of this many dev records.")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the --limit-dev sample.")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--jobs", default=f"1,{DEFAULT_JOBS}",
                    help="Comma-separated --jobs values to time (0: one per core).")
    add_search_args(ap)
    args = ap.parse_args()
    t0 = time.perf_counter()
    project = Project.load(args.project, runtime=Runtime(threads=args.threads,
                                                         compile_ranker=args.compile_ranker))
    print(f"project loaded in {time.perf_counter() - t0:.1f} s")
    if args.set:
        set_search(project, args.set)
        print("search settings changed: " + ", ".join(args.set))
    dev = list(read_records(args.dev, vocab=project.vocab))
    if args.limit_dev and args.limit_dev < len(dev):
        idx = np.random.default_rng(args.seed).choice(len(dev), args.limit_dev, replace=False)
        dev = [dev[i] for i in sorted(idx)]
    kinds = Counter(f"{r.language}/{r.type}" for r in dev)
    print(f"dev: {len(dev)} records (seed {args.seed}): "
          + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    suggestions(project, dev[:200], limit=20)  # warm-up
    first = None
    for jobs in [int(j) for j in args.jobs.split(",")]:
        t0 = time.perf_counter()
        preds = suggestions(project, dev, limit=20, jobs=jobs)
        seconds = time.perf_counter() - t0
        print(f"suggest --jobs {jobs} ({resolve_jobs(jobs)} processes): {len(dev)} records in "
              f"{seconds:.1f} s = {len(dev) / seconds:.0f} records/s (batches of 512), peak "
              f"RSS of this process {peak_rss_gb():.2f} GB", flush=True)
        ids = [[s.id for s in row] for row in preds]
        if first is not None and ids != first:
            raise SystemExit(f"--jobs {jobs} answered differently from --jobs {args.jobs}")
        first = ids
    m = evaluate(dev, {r.id: [s.id for s in row] for r, row in zip(dev, preds, strict=True)})
    print(json.dumps({k: round(v, 4) for k, v in m["overall"].items()}))


if __name__ == "__main__":
    main()
