#!/usr/bin/env python
"""Issue 66: the unseen lift (``unseen_weight``: `tagalign.suggest.fusion.blend` adds it to
the logit of a subject no training record carries), chosen on dev by a protocol.

Protocol. A saved hybrid project (``--project``) and the training records it was trained
on (``--train``, all or the same seeded ``--limit-train``), which count the buckets
(`tagalign.evaluate.frequency`: unseen 0, rare 1–4, common ≥ 5). A seeded dev sample
(``--limit-dev``, default 8,000, seed ``--seed``; never a file prefix: dev is sorted by
language and type) in file order, split by position into half A (even) and half B (odd),
so both hold the languages and types alike. The pipeline ranks each record's candidates
once, without the lift (the project's prior and support weights kept); each weight of
``--grid`` blends those scores again and cuts the top 20. The weight chosen on half A is
the one with the highest unseen recall@20 whose avg R@5..20 and F1@5 are each no more than
``--tolerance`` (0.0005) below the weight 0's on A; half B's figures of 0 and of that
weight are the report (nothing of B chose it). Each row: avg R@5..20, F1@5, recall@5 and
@20 of the unseen gold, unseen@20 of English records, rare and common @20, and of the top
5 the share of label-only suggestions (`tagalign.evaluate.label_only`) and their precision.

Also printed: the calibration that motivates the lift — per bucket of the candidate's
subject, the ranker's mean score and the share of gold among candidates in score bins.

    python -m benchmarks.quality.unseen_weight --project DIR [--limit-dev 8000]
        [--grid 0,0.25,0.5,0.75,1,1.25,1.5] [--tolerance 0.0005]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks._common import DATA, add_project_dev_args, seeded_sample
from tagalign.evaluate import evaluate
from tagalign.evaluate.frequency import COMMON_MIN, frequency_report, subject_counts
from tagalign.evaluate.label_only import LABEL_ONLY_K, label_only_precision
from tagalign.project import Project
from tagalign.records import Record, read_records
from tagalign.suggest.fusion import blend, top_k
from tagalign.suggest.sources import SOURCES

DEPTH = 20
BINS = [0.02, 0.05, 0.1, 0.2, 0.4, 0.7]
COLUMNS = ["avgR", "F1@5", "uns@5", "uns@20", "unsEN@20", "rare@20", "comm@20", "LOshare",
           "LOprec"]


def candidates(project: Project, dev: list[Record], batch_size: int = 1000) -> dict:
    """Every dev record's candidates scored once without the lift: record row, subject
    position, raw score, prior, supporting sources (per source) and the unseen prior."""
    pipe = project.recipe.pipeline
    keep: dict[str, list] = {k: [] for k in ("rows", "cols", "raw", "prior", "support")}
    for start in range(0, len(dev), batch_size):
        r = pipe.ranked(pipe.prepare(dev[start:start + batch_size]), DEPTH,
                        weights=(0.0, 0.0, 0.0))
        for key, value in (("rows", r.rows + start), ("cols", r.cols), ("raw", r.scores),
                           ("prior", r.X[:, r.names.index("prior")]), ("support", r.support)):
            keep[key].append(value)
    out = {k: np.concatenate(v) for k, v in keep.items()}
    out["floor"] = pipe.unseen_prior
    out["names"] = [s.name for s in pipe.sources]
    return out


def rankings(project: Project, dev: list[Record], cands: dict, weight: float
             ) -> dict[str, list[tuple[str, list[str]]]]:
    """Each record's top 20 under ``weight`` (the project's other weights kept)."""
    pipe = project.recipe.pipeline
    scores = blend(cands["raw"], cands["prior"], cands["support"].sum(1), pipe.prior_weight,
                   pipe.support_weight, weight, unseen_prior=cands["floor"])
    top = top_k(cands["rows"], cands["cols"], scores, len(dev), DEPTH)
    subjects, names = project.vocab.subjects, cands["names"]
    return {rec.id: [(subjects[c].id, [n for n, on in zip(names, cands["support"][i],
                                                          strict=True) if on])
                     for c, _, i in row] for rec, row in zip(dev, top, strict=True)}


def _value(x: float | None) -> float:
    """A figure, NaN for an empty group's (no gold in the bucket, no label-only one)."""
    return float("nan") if x is None else float(x)


def figures(dev: list[Record], ranked: dict, counts) -> dict[str, float]:
    ids = {rid: [sid for sid, _ in row] for rid, row in ranked.items()}
    overall = evaluate(dev, ids)["overall"]
    buckets = frequency_report(dev, ids, counts, [5, 20], COMMON_MIN)
    names = {src for row in ranked.values() for _, sources in row for src in sources}
    readers = {n for n in names if SOURCES[n].reads_labels}
    lo = label_only_precision(dev, ranked, readers, LABEL_ONLY_K)["overall"]
    en = buckets["by_language"].get("en", {}).get("unseen", {})
    every = buckets["overall"]
    return {"avgR": overall["avg_recall"], "F1@5": overall["f1@5"],
            "uns@5": _value(every["unseen"]["recall@5"]),
            "uns@20": _value(every["unseen"]["recall@20"]),
            "unsEN@20": _value(en.get("recall@20")),
            "rare@20": _value(every["rare"]["recall@20"]),
            "comm@20": _value(every["common"]["recall@20"]),
            "LOshare": _value(lo["share"]), "LOprec": _value(lo["label_only_precision"])}


def calibration(project: Project, dev: list[Record], cands: dict, counts) -> None:
    """Mean raw score and share of gold per score bin, by the candidate's bucket."""
    vocab = project.vocab
    n = np.zeros(len(vocab), np.int64)
    for sid, c in counts.items():
        if sid in vocab:
            n[vocab.position(sid)] = c
    gold = [set(vocab.positions([s for s in r.subjects if s in vocab])) for r in dev]
    is_gold = np.array([c in gold[r] for r, c in zip(cands["rows"].tolist(),
                                                     cands["cols"].tolist(), strict=True)])
    c = n[cands["cols"]]
    print("\ncalibration (raw ranker score: mean → share gold, candidates) by bucket")
    for name, m in (("unseen", c == 0), ("rare", (c >= 1) & (c < COMMON_MIN)),
                    ("common", c >= COMMON_MIN)):
        b = np.digitize(cands["raw"][m], BINS)
        cells = [f"{cands['raw'][m][b == k].mean():.3f}→{is_gold[m][b == k].mean():.3f} "
                 f"({(b == k).sum()})" for k in range(1, len(BINS) + 1) if (b == k).any()]
        print(f"  {name:<7}" + ", ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_project_dev_args(ap, limit_dev=8000)
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--limit-train", type=int, help="the seeded sample the project trained on")
    ap.add_argument("--grid", default="0,0.25,0.5,0.75,1,1.25,1.5")
    ap.add_argument("--tolerance", type=float, default=0.0005)
    args = ap.parse_args()
    grid = [float(w) for w in args.grid.split(",")]
    if 0.0 not in grid:
        grid = [0.0, *grid]
    project = Project.load(args.project)
    train = seeded_sample(list(read_records(args.train, vocab=project.vocab)),
                          args.limit_train, args.seed)
    counts = subject_counts(train)
    dev = seeded_sample([r for r in read_records(args.dev, vocab=project.vocab) if r.subjects],
                        args.limit_dev, args.seed)
    halves = {"A": dev[0::2], "B": dev[1::2]}
    for name, half in halves.items():
        langs = {lg: sum(r.language == lg for r in half) for lg in ("de", "en")}
        print(f"half {name}: {len(half)} records ({langs['de']} de, {langs['en']} en)")
    cands = {name: candidates(project, half) for name, half in halves.items()}
    calibration(project, dev[0::2], cands["A"], counts)
    table = {name: {w: figures(half, rankings(project, half, cands[name], w), counts)
                    for w in grid} for name, half in halves.items()}
    head = f"{'weight':>7} {'half':>4} " + " ".join(f"{c:>9}" for c in COLUMNS)
    print(f"\n{head}\n{'-' * len(head)}")
    for w in grid:
        for name in halves:
            print(f"{w:7.2f} {name:>4} " + " ".join(f"{table[name][w][c]:9.4f}"
                                                     for c in COLUMNS))
    base = table["A"][0.0]
    ok = [w for w in grid if table["A"][w]["avgR"] >= base["avgR"] - args.tolerance
          and table["A"][w]["F1@5"] >= base["F1@5"] - args.tolerance]
    # NaN (no unseen gold in A) chooses 0: nothing to lift
    chosen = max(ok, key=lambda w: (np.nan_to_num(table["A"][w]["uns@20"], nan=-1.0), -w))
    print(f"\nchosen on half A (highest unseen R@20 within {args.tolerance} of 0's avg R and "
          f"F1@5): {chosen}")
    print("half B, the report:")
    for w in sorted({0.0, chosen}):
        print(f"{w:7.2f}    B " + " ".join(f"{table['B'][w][c]:9.4f}" for c in COLUMNS))


if __name__ == "__main__":
    main()
