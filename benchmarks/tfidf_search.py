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

import numpy as np

from _common import add_project_dev_args, project_and_dev
from tagalign.suggest.sources.neighbours import TfidfNeighbours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_project_dev_args(ap, limit_dev=1000)
    ap.add_argument("--settings", default="0.05:300,0.05:200,0.03:300",
                    help="prune_df:rescore pairs, comma-separated")
    args = ap.parse_args()

    project, dev = project_and_dev(args)
    pipe = project.recipe.pipeline
    trained = next(s for s in pipe.sources if s.name == "tfidf_knn")
    batch = pipe.prepare(dev)

    def search(prune_df: float, rescore: int) -> tuple[dict, dict]:
        src = TfidfNeighbours(k=trained.config.k, prune_df=prune_df, rescore=rescore)
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
