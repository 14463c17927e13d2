#!/usr/bin/env python
"""Issue 66: what wider searches reach of the long tail, before a training pays for one.

Protocol. A saved hybrid project (``--project``) and the training records it was trained
on (``--train``), which count the buckets (`tagalign.evaluate.frequency`: unseen 0, rare
1–4, common ≥ 5). A seeded dev sample (``--limit-dev``, default 4,000, seed ``--seed``;
never a file prefix: dev is sorted by language and type), its make-up printed. For the
project as trained, then for each ``--variant`` (comma-separated ``SOURCE.FIELD=VALUE``
search settings, `_common.set_search`, applied to a fresh load of the project), per
bucket: the share of the gold among any source's candidates (*reached*) and the recall@20
of the ranking the trained ranker and weights give (*R@20*; ``--unseen-weight`` ranks with
another lift, in memory), and the candidates a record.
The ranker learned the trained searches' candidates, so a variant's R@20 is what the
wider candidates give without retraining; *reached* says whether a training could gain.

    python -m benchmarks.quality.tail_reach --project DIR [--limit-dev 4000] [--unseen-weight W]
        [--variant labels.title_top_k=60 --variant tfidf_knn.k=60,tfidf_knn.top_k=100]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks._common import DATA, add_project_dev_args, project_and_dev, set_search
from tagalign.evaluate.frequency import BUCKETS, frequency_report, subject_counts
from tagalign.project import Project
from tagalign.records import Record, read_records

DEPTH = 20


def reach(project: Project, dev: list[Record], counts: dict[str, int], batch_size: int = 512
          ) -> tuple[float, dict[str, tuple[int, float, float]]]:
    """Candidates a record, and per bucket (gold, reached, recall@20): `frequency_report`
    of each record's candidates (all of them: reached) and of its top 20."""
    pipe = project.recipe.pipeline
    ids = [s.id for s in project.vocab.subjects]
    candidates: dict[str, list[str]] = {}
    top: dict[str, list[str]] = {}
    for start in range(0, len(dev), batch_size):
        chunk = dev[start:start + batch_size]
        r = pipe.ranked(pipe.prepare(chunk), DEPTH)
        # the candidates come grouped by record, in row order (`merge`)
        bounds = np.searchsorted(r.rows, np.arange(len(chunk) + 1))
        for i, (rec, row) in enumerate(zip(chunk, r.top, strict=True)):
            candidates[rec.id] = [ids[c] for c in r.cols[bounds[i]:bounds[i + 1]]]
            top[rec.id] = [ids[c] for c, _, _ in row]
    n_cands = sum(map(len, candidates.values()))
    widest = max(map(len, candidates.values()), default=1) or 1
    reached = frequency_report(dev, candidates, counts, [widest])["overall"]
    ranked = frequency_report(dev, top, counts, [DEPTH])["overall"]
    nan = float("nan")

    def share(x: float | None) -> float:
        return nan if x is None else x

    return n_cands / max(len(dev), 1), {
        b: (reached[b]["gold"], share(reached[b][f"recall@{widest}"]),
            share(ranked[b][f"recall@{DEPTH}"])) for b in BUCKETS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_project_dev_args(ap, limit_dev=4000)
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz",
                    help="the records the project was trained on (they count the buckets)")
    ap.add_argument("--variant", action="append", default=[],
                    metavar="SOURCE.FIELD=VALUE[,…]", help="search settings tried together")
    ap.add_argument("--unseen-weight", type=float,
                    help="the unseen lift to rank with (default: the project's; a project "
                         "saved before the lift has 0), set in memory only")
    args = ap.parse_args()
    project, dev = project_and_dev(args)
    counts = subject_counts(read_records(args.train, vocab=project.vocab))
    lift = project.recipe.pipeline.unseen_weight if args.unseen_weight is None \
        else args.unseen_weight
    print(f"counts on {args.train}; recall@{DEPTH} by the trained ranker, the unseen lift "
          f"{lift}")
    head = f"{'search':44} {'cands':>6}" + "".join(
        f" {b + ' reached':>15} {b + ' R@20':>12}" for b in BUCKETS)
    print(head)
    print("-" * len(head))
    for variant in ["", *args.variant]:
        t0 = time.perf_counter()
        model = project if not variant else Project.load(args.project)
        if variant:
            set_search(model, variant.split(","))
        if args.unseen_weight is not None:
            model.recipe.pipeline.unseen_weight = args.unseen_weight
        per, buckets = reach(model, dev, counts)
        print(f"{variant or '(as trained)':44} {per:6.1f}" + "".join(
            f" {buckets[b][1]:15.4f} {buckets[b][2]:12.4f}" for b in BUCKETS)
            + f"   ({time.perf_counter() - t0:.0f} s)")
    print("gold: " + ", ".join(f"{b} {g}" for b, (g, _, _) in buckets.items()))


if __name__ == "__main__":
    main()
