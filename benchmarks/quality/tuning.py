#!/usr/bin/env python
"""Issue 19 B benchmark: what `tagalign optimize` and `tagalign hyperopt` buy a hybrid.

Protocol: a hybrid (default parameters) trains on a seeded sample of train (``--n-train``,
seed 0); from dev, a seeded sample of 2 × ``--n-dev`` records (seed 1) is split in two:
the *tuning* half is what optimize and hyperopt see, the *held-out* half is only scored
(figures on the tuning half are in-sample). Prints, before and after tuning: doc-averaged
F1 at the limit/threshold in force (before: `suggest`'s default limit 20, threshold 0),
avg R@5..20 (the task's headline), and hyperopt's seconds per trial.

    flock /tmp/cpu.lock python -m benchmarks.quality.tuning [--n-train 10000] [--trials 20]
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks._common import add_data_args, suggestions
from tagalign.evaluate import evaluate
from tagalign.evaluate.hyperopt import plan_study, run_study
from tagalign.evaluate.optimize import grid_search
from tagalign.evaluate.selection import ScoredHits, selection_metrics
from tagalign.project import DEFAULT_LIMIT, Project
from tagalign.records import read_records
from tagalign.vocab import load_vocabulary


def sample(path: Path, vocab, n: int, seed: int) -> list:
    recs = [r for r in read_records(path, vocab=vocab) if r.subjects]
    idx = np.random.default_rng(seed).choice(len(recs), n, replace=False)
    return [recs[i] for i in sorted(idx)]


def langs(records) -> str:
    c = Counter(r.language or "?" for r in records)
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))


def figures(project: Project, records, limit: int | None = None,
            threshold: float | None = None) -> tuple[float, float]:
    """(doc-avg F1 at the project's limit/threshold unless given, avg R@5..20)."""
    rows = suggestions(project, records, limit=20, threshold=0.0)
    avg_r = evaluate(records, {r.id: [s.id for s in row] for r, row in zip(records, rows,
                                                                          strict=True)}
                     )["overall"]["avg_recall"]
    sh = ScoredHits.build([set(r.subjects) for r in records],
                          [[(s.id, s.score) for s in row] for row in rows], 20)
    lim, thr = project.defaults()
    f1 = selection_metrics(sh, limit or lim, thr if threshold is None else threshold)
    return f1["F1_doc_avg"], avg_r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_data_args(ap)
    ap.add_argument("--n-train", type=int, default=10_000)
    ap.add_argument("--n-dev", type=int, default=2_000)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/tagalign-tuning-bench"))
    args = ap.parse_args()
    vocab = load_vocabulary(args.vocab)
    train = sample(args.train, vocab, args.n_train, 0)
    pool = sample(args.dev, vocab, 2 * args.n_dev, 1)
    order = np.random.default_rng(2).permutation(len(pool))
    tune = [pool[i] for i in sorted(order[:args.n_dev])]
    held = [pool[i] for i in sorted(order[args.n_dev:])]
    print(f"train sample (seed 0): {len(train)} records ({langs(train)})")
    print(f"dev tuning sample (seed 1): {len(tune)} ({langs(tune)}); held-out: {len(held)} "
          f"({langs(held)})")

    shutil.rmtree(args.workdir, ignore_errors=True)
    project = Project.create(args.workdir / "proj", vocab, "hybrid")
    t0 = time.perf_counter()
    project.train(train)
    print(f"training: {time.perf_counter() - t0:.0f} s")

    before = {name: figures(project, recs, DEFAULT_LIMIT, 0.0)
              for name, recs in (("tuning", tune), ("held-out", held))}

    t0 = time.perf_counter()
    rows = suggestions(project, tune, limit=15, threshold=0.0)
    sh = ScoredHits.build([set(r.subjects) for r in tune],
                          [[(s.id, s.score) for s in row] for row in rows], 15)
    grid = grid_search(sh)
    best = grid.best("f1")
    print(f"optimize: {time.perf_counter() - t0:.1f} s (one suggest pass + "
          f"{len(grid.limits) * len(grid.thresholds)} grid points); best F1 {best.f1:.4f} at "
          f"limit {best.limit}, threshold {best.threshold:.2f} (P {best.precision:.4f}, "
          f"R {best.recall:.4f}); Pareto front {len(grid.pareto())} points")
    project.set_defaults(best.limit, best.threshold)
    after_opt = {name: figures(project, recs) for name, recs in (("tuning", tune),
                                                                 ("held-out", held))}

    t0 = time.perf_counter()
    result = run_study(plan_study(project.recipe, tune, "avg_recall"), trials=args.trials,
                       storage=f"sqlite:///{args.workdir / 'study.db'}", seed=0)
    wall = time.perf_counter() - t0
    print(f"hyperopt: {args.trials} trials in {wall:.0f} s (candidates computed once "
          f"included); {np.mean(result.seconds):.2f} s per trial (median "
          f"{np.median(result.seconds):.2f}); avg R@5..20 {result.baseline:.4f} → "
          f"{result.best_value:.4f}; best {result.best_params}")
    project.set_params(result.best_params)
    after_hyp = {name: figures(project, recs) for name, recs in (("tuning", tune),
                                                                 ("held-out", held))}

    print("\nsample     stage                        F1 (doc avg) at limit/thr   avg R@5..20")
    for name in ("tuning", "held-out"):
        for stage, figs, point in (("before (limit 20, thr 0.00)", before, ""),
                                   ("after optimize", after_opt,
                                    f"{best.limit}/{best.threshold:.2f}"),
                                   ("after optimize + hyperopt", after_hyp,
                                    f"{best.limit}/{best.threshold:.2f}")):
            f1, avg_r = figs[name]
            print(f"{name:10} {stage:28} {f1:.4f} {point:>9}           {avg_r:.4f}")


if __name__ == "__main__":
    main()
