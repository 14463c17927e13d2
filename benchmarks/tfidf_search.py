#!/usr/bin/env python
"""The TF-IDF neighbours' search: exact against two-step (common terms pruned, then the
best ``--rescore`` rescored exactly), issue 18.

Loads a trained hybrid project and a seeded sample of dev records (``--limit-dev``, seed
``--seed``; never a file prefix: dev is sorted by language and type), prepares them as the
pipeline does, and times each setting's neighbour search on one thread of control, per
language. Prints the seconds and the share of the exact search's vote weight (the k
neighbours' similarity², as the vote uses them) that the neighbours found hold.

    python benchmarks/tfidf_search.py --project runs/hybrid-full [--settings 0.05:300,0.05:200]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np

from _common import DATA, seeded_sample
from tagalign.project import Project
from tagalign.records import read_records
from tagalign.suggest.sources.neighbours import TfidfNeighbours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--limit-dev", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", default="0.05:300,0.05:200,0.03:300",
                    help="prune_df:rescore pairs, comma-separated")
    args = ap.parse_args()

    project = Project.load(args.project)
    dev = seeded_sample(list(read_records(args.dev, vocab=project.vocab)), args.limit_dev,
                        args.seed)
    print(f"dev: {len(dev)} records (seed {args.seed}): " + ", ".join(
        f"{k} {n}" for k, n in Counter(f"{r.language}/{r.type}" for r in dev).most_common()))
    pipe = project.recipe.pipeline_
    trained = next(s for s in pipe.sources if s.name == "tfidf_knn")
    batch = pipe.prepare(dev)

    def search(prune_df: float, rescore: int) -> tuple[dict, dict]:
        src = TfidfNeighbours(k=trained.k, prune_df=prune_df, rescore=rescore)
        src.X_, src.rows_, src.memory = trained.X_, trained.rows_, trained.memory
        secs, sims = {}, {}
        for lang, part in batch.tfidf.items():
            one = type(batch)(batch.records, batch.languages)
            one.tfidf = {lang: part}
            src._search_index(lang)  # built once at load, not per query
            t0 = time.perf_counter()
            _, s = src.neighbours(one)
            secs[lang] = time.perf_counter() - t0
            sims[lang] = s[part[0]].astype(np.float64)
        return secs, sims

    exact_s, exact = search(0.0, 0)
    print(f"\n{'setting':<22}" + "".join(f"{lang + ' s':>9}{lang + ' kept':>10}"
                                        for lang in exact) + f"{'all s':>8}")
    print(f"{'exact':<22}" + "".join(f"{exact_s[lang]:9.2f}{1:10.3f}" for lang in exact)
          + f"{sum(exact_s.values()):8.2f}")
    for setting in args.settings.split(","):
        prune, rescore = setting.split(":")
        secs, sims = search(float(prune), int(rescore))
        print(f"{'prune ' + prune + ', rescore ' + rescore:<22}" + "".join(
            f"{secs[lang]:9.2f}"
            f"{(sims[lang] ** 2).sum() / (exact[lang] ** 2).sum():10.3f}" for lang in exact)
            + f"{sum(secs.values()):8.2f}")


if __name__ == "__main__":
    main()
