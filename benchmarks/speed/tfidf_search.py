#!/usr/bin/env python
"""The TF-IDF neighbours' search: exact against two-step (common terms pruned, then the
best ``--rescore`` rescored exactly), issue 18.

Loads a trained hybrid project and a seeded sample of dev records (``--limit-dev``, seed
``--seed``; never a file prefix: dev is sorted by language and type), prepares them as the
pipeline does, and times each setting's neighbour search on one thread of control, per
language. Prints the seconds and the share of the exact search's vote weight (the k
neighbours' similarity², as the vote uses them) that the neighbours found hold.

    python -m benchmarks.speed.tfidf_search --project runs/hybrid-full \
        [--settings 0.05:300,0.05:200]

``--sizes`` (issue 48) needs no project: the search kinds (`tagalign.index.sparse`) over
memories of several sizes — ``train``: the real TF-IDF rows of every train record with
subjects (90,452), the featurizer fitted on them as the hybrid fits its own; a number: that
many synthetic records made as ``benchmarks/scale/memory_1m.py`` makes them (`Recombination`:
title of one pool record + the halves of two others' abstracts, from a seeded ``--pool``
sample of train). Queries: ``--limit-dev`` seeded real dev records, k = ``--k``, searched in
chunks of 64 on one thread. Per setting (``--kinds``: ``exact``, ``product:PRUNE_DF[:RESCORE]``,
``impact:POSTINGS:RESCORE``): build seconds, index MiB (beside the records' matrix) and the
RSS it added, queries/s, and recall@k and @10 against ``exact`` (share of the exact top-k
found). ``--lock FILE`` takes an exclusive flock on FILE around each build and each timed
search only (a shared machine's CPU lock):

    OMP_NUM_THREADS=1 python -m benchmarks.speed.tfidf_search --sizes train,1000000 \
        --lock /tmp/tagalign-cpu.lock
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks._common import add_data_args, cpu_lock, peak_rss_gb, project_and_dev, seeded_sample
from tagalign.index.sparse import SPARSE_SEARCHES, ImpactSearch, SparseSearch
from tagalign.records import read_records
from tagalign.runtime import release_free_memory
from tagalign.suggest.sources.base import record_languages
from tagalign.suggest.sources.neighbours import QUERY_CHUNK, TfidfNeighbours
from tagalign.text import Analyzer
from tagalign.text.tfidf import TfidfFeaturizer

MIB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--project", type=Path, help="a trained hybrid (the two-step settings)")
    ap.add_argument("--limit-dev", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", default="0.05:300,0.05:200,0.03:300",
                    help="prune_df:rescore pairs, comma-separated")
    ap.add_argument("--sizes", help="memories searched without a project: train and/or "
                    "record counts, comma-separated (e.g. train,1000000)")
    ap.add_argument("--kinds", default="exact,product:0.05:300,impact:10000:300,"
                    "impact:20000:1000,impact:40000:1000,impact:40000:2000")
    ap.add_argument("--pool", type=int, default=30_000, help="train records recombined")
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--lock", type=Path, help="flock this file around each heavy step")
    args = ap.parse_args()
    if args.sizes:
        return scale(args)
    if args.project is None:
        ap.error("give --project (two-step settings) or --sizes")

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

    exact_s, exact = search(0.0, 1)  # prune_df 0: the exact product, rescore unused (>= 1)
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




def parse_kind(spec: str) -> tuple[str, dict]:
    """``exact`` | ``product:PRUNE_DF[:RESCORE]`` | ``impact:POSTINGS:RESCORE`` → (kind,
    settings)."""
    name, *values = spec.split(":")
    if name == "exact":
        return "product", {"prune_df": 0.0}
    if name == "product":
        return "product", {"prune_df": float(values[0]),
                           **({"rescore": int(values[1])} if len(values) > 1 else {})}
    return name, {"postings": int(values[0]), "rescore": int(values[1])}


def rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / MIB


def run_kind(kind: str, settings: dict, memory: dict[str, sp.csr_matrix],
             queries: dict[str, sp.csr_matrix], k: int, lock: Path | None,
             built: dict) -> dict:
    """Build the search over each language's records, then time the queries; per language
    the neighbours found (positions in that language's matrix). ``built``: impact indexes
    already built over ``memory`` (their settings only matter to the search), reused."""
    cls = SPARSE_SEARCHES.lookup(kind)
    config = cls.config_class(**settings)
    out: dict = {"build_s": 0.0, "search_s": 0.0, "mib": 0.0, "rss_mib": 0.0, "found": {}}
    for lang, X in memory.items():
        if lang not in queries:
            continue
        index: SparseSearch
        if cls is ImpactSearch and lang in built:
            first, build_s, rss = built[lang]
            index = ImpactSearch(X, config, {name: getattr(first, name) for name in
                                             ("indptr", "indices", "data", "levels")})
        else:
            before = rss_mib()
            with cpu_lock(lock):
                t0 = time.perf_counter()
                index = cls(X, config)
                build_s = time.perf_counter() - t0
            rss = rss_mib() - before
            if cls is ImpactSearch:
                built[lang] = (index, build_s, rss)
        out["build_s"] += build_s
        out["rss_mib"] += rss
        out["mib"] += index.nbytes() / MIB
        Q = queries[lang]
        found = []
        with cpu_lock(lock):
            t0 = time.perf_counter()
            for start in range(0, Q.shape[0], QUERY_CHUNK):
                found.append(index.search(Q[start:start + QUERY_CHUNK], k)[0])
            out["search_s"] += time.perf_counter() - t0
        out["found"][lang] = np.vstack(found)
        del index
        release_free_memory()
    return out


def recall(found: dict[str, np.ndarray], exact: dict[str, np.ndarray], k: int) -> float:
    """Share of the exact top-k found, over every query of every language."""
    hits = [len(set(f[:k].tolist()) & set(e[:k].tolist())) / k
            for lang in exact for f, e in zip(found[lang], exact[lang], strict=True)]
    return float(np.mean(hits))


def scale(args: argparse.Namespace) -> None:
    """Issue 48: the search kinds over the real train TF-IDF and synthetic memories."""
    import torch  # loaded in a hybrid's process (its encoder): the product's top-k uses it

    from benchmarks.scale.memory_1m import Recombination

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    analyzer = Analyzer()
    train = [r for r in read_records(args.train) if r.subjects]
    langs = record_languages(train)
    tokens = [analyzer.tokens(r.text, lg) for r, lg in zip(train, langs, strict=True)]
    featurizer = TfidfFeaturizer().fit(tokens, langs)
    dev = seeded_sample(list(read_records(args.dev)), args.limit_dev, args.seed)
    dev_langs = record_languages(dev)
    queries = {lang: Q for lang, (_, Q) in featurizer.transform(
        [analyzer.tokens(r.text, lg) for r, lg in zip(dev, dev_langs, strict=True)],
        dev_langs).items()}
    print(f"train: {len(train):,} records with subjects, TF-IDF fitted on all of them in "
          f"{time.perf_counter() - t0:.0f} s; queries: {len(dev)} dev records (seed "
          f"{args.seed}): " + ", ".join(f"{key} {n}" for key, n in Counter(
              f"{r.language}/{r.type}" for r in dev).most_common()) + f"; k = {args.k}")
    table = []
    for size in args.sizes.split(","):
        if size == "train":
            memory = {lang: X for lang, (_, X) in featurizer.transform(tokens, langs).items()}
            what = f"real train ({len(train):,})"
        else:
            rec = Recombination.draw(train, featurizer, args.pool, int(size), args.seed)
            memory = {lang: rec.tfidf(featurizer, analyzer, lang)[1]
                      for lang in featurizer.vectorizers_}
            what = f"synthetic {int(size):,} (pool {args.pool:,}, seed {args.seed})"
        records = sum(X.shape[0] for X in memory.values())
        nnz = sum(X.nnz for X in memory.values())
        print(f"\n{what}: " + ", ".join(f"{lang} {X.shape[0]:,} × {X.shape[1]:,}"
                                        for lang, X in memory.items())
              + f"; {nnz / records:.0f} terms per record; records' matrix "
              f"{nnz * 8 / MIB:,.0f} MiB", flush=True)
        exact = None
        built: dict = {}
        for spec in args.kinds.split(","):
            kind, settings = parse_kind(spec)
            got = run_kind(kind, settings, memory, queries, args.k, args.lock, built)
            exact = exact or got["found"]
            row = {"memory": what, "search": spec, "qps": len(dev) / got["search_s"],
                   f"r@{args.k}": recall(got["found"], exact, args.k),
                   "r@10": recall(got["found"], exact, 10), "build_s": got["build_s"],
                   "mib": got["mib"], "rss_mib": got["rss_mib"]}
            table.append(row)
            print(f"  {spec}: {row['qps']:,.0f} queries/s, recall@{args.k} "
                  f"{row[f'r@{args.k}']:.3f}, @10 {row['r@10']:.3f}; built in "
                  f"{row['build_s']:.1f} s, {row['mib']:,.0f} MiB (RSS "
                  f"+{row['rss_mib']:,.0f} MiB)", flush=True)
        del memory, built
        release_free_memory()
    print(f"\n| memory | search | queries/s | recall@{args.k} | recall@10 | build s | "
          "index MiB | RSS added MiB |\n|---|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['memory']} | {row['search']} | {row['qps']:,.0f} | "
              f"{row[f'r@{args.k}']:.3f} | {row['r@10']:.3f} | {row['build_s']:.1f} | "
              f"{row['mib']:,.0f} | {row['rss_mib']:,.0f} |")
    print(f"peak RSS of this process: {peak_rss_gb():.2f} GB")


if __name__ == "__main__":
    main()
