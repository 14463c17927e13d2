#!/usr/bin/env python
"""Issue 18: ceiling analysis of the hybrid — do the sources or the ranker hold it back?

Protocol: the recipe's own stacking split of train (sources fit on split A, the ranker
learns from split B; dev never trains anything), then a seeded sample of dev records
(``--limit-dev``, seed ``--seed``; never a file prefix: dev is sorted by language and type).
Every source is run once with ``--widest`` candidates per record; a cut to k keeps each
source's first k (`Candidates.truncate`, the same as running it with ``top_k=k``).

Prints, for k = 30/50/100 candidates per source: the share of the dev sample's gold
subjects held by each source alone and by the union of all sources (micro: held gold /
all gold), overall, per language and per record type; and R@20 / avg R@5..20 after fusion
(the ranker trained on split B at the recipe's k). The wide candidates of split B and of
the dev sample are cached in ``--workdir`` (``candidates-*.npz``) for ranker experiments.

    python benchmarks/hybrid_ceiling.py [--limit-train N] [--limit-dev 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.progress import track

from _common import add_data_args, seeded_sample
from tagalign.recipes.hybrid import TOP_K_SOURCES, HybridRecipe
from tagalign.records import Record, read_records
from tagalign.suggest.pipeline import HybridPipeline
from tagalign.suggest.sources.base import Candidates
from tagalign.suggest.sources.memory import label_matrix
from tagalign.train.phases import PhaseRunner
from tagalign.vocab import load_vocabulary

KS = (30, 50, 100)


def wide_candidates(pipe: HybridPipeline, records: list[Record], widest: int,
                    batch_size: int = 1000) -> list[Candidates]:
    """Each source's candidates for ``records`` with ``widest`` per record (rows: record
    positions in ``records``)."""
    for src in pipe.sources:
        if src.name in TOP_K_SOURCES:
            src.config = replace(src.config, top_k=widest)
    parts: list[list[Candidates]] = []
    for start in track(range(0, len(records), batch_size), description="candidates",
                       transient=True):
        batch = pipe.prepare(records[start:start + batch_size])
        cands = pipe.candidates(batch)
        for c in cands:
            c.rows = c.rows + start
        parts.append(cands)
    return [Candidates(np.concatenate([p[j].rows for p in parts]),
                       np.concatenate([p[j].cols for p in parts]),
                       np.concatenate([p[j].feats for p in parts]), parts[0][j].names)
            for j in range(len(pipe.sources))]


def save_candidates(path: Path, names: list[str], cands: list[Candidates]) -> None:
    arrays = {}
    for name, c in zip(names, cands, strict=True):
        arrays.update({f"{name}.rows": c.rows, f"{name}.cols": c.cols, f"{name}.feats": c.feats})
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)
    (path.with_suffix(".json")).write_text(json.dumps(
        {"sources": names, "features": {n: c.names for n, c in zip(names, cands, strict=True)}}))


def load_candidates(path: Path) -> tuple[list[str], list[Candidates]]:
    meta = json.loads(path.with_suffix(".json").read_text())
    data = np.load(path)
    return meta["sources"], [Candidates(data[f"{n}.rows"], data[f"{n}.cols"],
                                        data[f"{n}.feats"], meta["features"][n])
                             for n in meta["sources"]]


def held(c: Candidates, gold, n_subjects: int) -> np.ndarray:
    """Per record, how many gold subjects the candidates hold."""
    keys = np.unique(c.rows * n_subjects + c.cols)
    rows, cols = keys // n_subjects, keys % n_subjects
    hit = np.asarray(gold[rows, cols]).ravel() > 0
    return np.bincount(rows[hit], minlength=gold.shape[0])


def union(cands: list[Candidates]) -> Candidates:
    return Candidates(np.concatenate([c.rows for c in cands]),
                      np.concatenate([c.cols for c in cands]), np.zeros((0, 0)), [])


def groups(records: list[Record]) -> dict[str, np.ndarray]:
    out = {"all": np.ones(len(records), bool)}
    for key in ("language", "type"):
        for value in sorted({getattr(r, key) for r in records}):
            out[f"{key}={value}"] = np.array([getattr(r, key) == value for r in records])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--limit-train", type=int, help="a seeded sample of train (default all)")
    ap.add_argument("--limit-dev", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--widest", type=int, default=100)
    ap.add_argument("--workdir", type=Path, default=Path("runs/h18-stage"))
    ap.add_argument("--param", action="append", default=[], help="recipe parameter key=JSON")
    args = ap.parse_args()

    vocab = load_vocabulary(args.vocab)
    train = list(read_records(args.train, vocab=vocab))
    if args.limit_train:
        train = seeded_sample(train, args.limit_train, args.seed)
    dev = seeded_sample(list(read_records(args.dev, vocab=vocab)), args.limit_dev, args.seed)
    print(f"train {len(train)} records; dev sample {len(dev)} (seed {args.seed}): "
          + ", ".join(f"{k} {n}" for k, n in Counter(
              f"{r.language}/{r.type}" for r in dev).most_common()))
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    recipe = HybridRecipe(vocab, **params)
    t0 = time.perf_counter()
    stage = recipe.trainer().stack(train, PhaseRunner(args.workdir))
    print(f"stage (sources on split A): {time.perf_counter() - t0:.0f} s; "
          f"split B {len(stage.ranker_records)} records")
    names = [s.name for s in stage.pipeline.sources]
    for label, recs in (("B", stage.ranker_records), ("dev", dev)):
        path = args.workdir / f"candidates-{label}-{args.widest}.npz"
        if not path.exists():
            t0 = time.perf_counter()
            save_candidates(path, names, wide_candidates(stage.pipeline, recs, args.widest))
            print(f"{label}: wide candidates in {time.perf_counter() - t0:.0f} s")
    (args.workdir / "dev-ids.json").write_text(json.dumps([r.id for r in dev]))
    (args.workdir / "B-ids.json").write_text(json.dumps([r.id for r in stage.ranker_records]))

    _, cands = load_candidates(args.workdir / f"candidates-dev-{args.widest}.npz")
    gold = label_matrix(dev, vocab).tocsr()
    n_gold = np.asarray(gold.sum(axis=1)).ravel()
    n = len(vocab)
    table = []
    for k in KS:
        cut = [c.truncate(k) for c in cands]
        per = {name: held(c, gold, n) for name, c in zip(names, cut, strict=True)}
        every = union(cut)
        per["union"] = held(every, gold, n)
        size = len(np.unique(every.rows * n + every.cols)) / len(dev)
        for g, m in groups(dev).items():
            table.append({"k": k, "group": g, "n": int(m.sum()), "union_size": size,
                          **{name: float(h[m].sum() / max(n_gold[m].sum(), 1))
                             for name, h in per.items()}})
    print(f"\nShare of gold subjects held by the candidates (micro), dev sample of {len(dev)}")
    cols = [*names, "union"]
    print(f"{'k':>4} {'group':<22}{'n':>6}" + "".join(f"{c:>11}" for c in cols)
          + f"{'|union|':>9}")
    for row in table:
        print(f"{row['k']:>4} {row['group']:<22}{row['n']:>6}"
              + "".join(f"{row[c]:11.3f}" for c in cols) + f"{row['union_size']:9.0f}")
    (args.workdir / "ceiling.json").write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
