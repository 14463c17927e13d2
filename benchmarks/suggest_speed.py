#!/usr/bin/env python
"""Batch suggest speed and quality of a saved project on dev (no training).

``--limit-dev N`` scores a sample of N dev records drawn with ``--seed`` (never a file
prefix: dev is sorted by language and type); the sample's make-up is printed.

    python benchmarks/suggest_speed.py --project runs/hybrid-full [--limit-dev N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from _common import DATA, peak_rss_gb
from tagalign.evaluate import evaluate
from tagalign.project import Project
from tagalign.records import read_records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--limit-dev", type=int, help="A seeded sample of this many dev records.")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the --limit-dev sample.")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        from tagalign.runtime import set_threads

        set_threads(args.threads)
    t0 = time.perf_counter()
    project = Project.load(args.project)
    print(f"project loaded in {time.perf_counter() - t0:.1f} s")
    dev = list(read_records(args.dev, vocab=project.vocab))
    if args.limit_dev and args.limit_dev < len(dev):
        idx = np.random.default_rng(args.seed).choice(len(dev), args.limit_dev, replace=False)
        dev = [dev[i] for i in sorted(idx)]
    kinds = Counter(f"{r.language}/{r.type}" for r in dev)
    print(f"dev: {len(dev)} records (seed {args.seed}): "
          + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    project.suggest(dev[:200], limit=20)  # warm-up
    t0 = time.perf_counter()
    preds = project.suggest(dev, limit=20)
    seconds = time.perf_counter() - t0
    print(f"suggest: {len(dev)} records in {seconds:.1f} s = {len(dev) / seconds:.0f} records/s"
          f" (batch), peak RSS {peak_rss_gb():.2f} GB")
    m = evaluate(dev, {r.id: [s.id for s in row] for r, row in zip(dev, preds, strict=True)})
    print(json.dumps({k: round(v, 4) for k, v in m["overall"].items()}))


if __name__ == "__main__":
    main()
