#!/usr/bin/env python
"""Batch suggest speed and quality of a saved project on dev (no training).

    python benchmarks/suggest_speed.py --project runs/hybrid-full [--limit-dev N]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import DATA, peak_rss_gb
from tagalign.evaluate import evaluate
from tagalign.project import Project
from tagalign.records import read_records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--limit-dev", type=int)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        from tagalign.runtime import set_threads

        set_threads(args.threads)
    t0 = time.perf_counter()
    project = Project.load(args.project)
    print(f"project loaded in {time.perf_counter() - t0:.1f} s")
    dev = list(read_records(args.dev, vocab=project.vocab, limit=args.limit_dev))
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
