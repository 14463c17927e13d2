#!/usr/bin/env python
"""Issue 9 benchmark: ordinal graded word-in-context (CoMeDi subtask 1), recipe R4.

Protocol
  train  ``--limit-pairs`` labelled pairs of ../shared/data/comedi/train (all languages)
         drawn with a fixed seed (numpy default_rng(--seed).choice, never a file prefix:
         the files are sorted by lemma);
  dev    ``--dev-pairs`` pairs of comedi/dev sampled the same way (all when 0), split per
         language by a seeded permutation into half A and half B. Half A chooses the
         checkpoint (dev Spearman after each epoch) and fits the cut points; alpha and
         Spearman are reported on half B, so no figure is fitted on itself.
Rows: the untuned encoder with fitted cut points (the zero-shot floor, markers added, no
training), then one fine-tuning run per loss (``--rows``). Each row runs in its own
process, so its peak RSS is its own. pairs/s is prediction on half B (both usages encoded,
no cache). Results are appended to ``--out`` (JSONL) as each row finishes.

The published settings (XLM-R-large, lr 1e-5, batch 32, 10 epochs, 128 tokens, all layers)
are GPU-sized; on 2 CPU cores the rows deviate in budget only (limit_pairs, epochs,
max_seq_length, train_layers, lr), printed in the table.

    flock /tmp/tagalign-cpu.lock .venv/bin/python -m benchmarks.pairs.ordinal_wic --threads 2
    .venv/bin/python -m benchmarks.pairs.ordinal_wic --device cuda --epochs 10 --limit-pairs 0 \\
        --train-layers -1 --max-seq-length 128 --lr 1e-5 --dev-pairs 0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks._common import DATA, peak_rss_gb

#: Published mean alpha on CoMeDi test (methods.md, R4), printed beside ours.
ANCHORS = [("XL-DURel (XLM-R-large, WiC+CoMeDi, AnglE, GPU)", 0.667),
           ("best CoMeDi shared-task system", 0.656),
           ("XL-LEXEME off the shelf", 0.580),
           ("untuned SBERT", 0.086)]
LOSSES = ("angle", "cosent", "contrastive", "cosine")
#: a row is ``floor`` (no training) or a loss, ``-target`` for target pooling
ROWS = ("floor", "floor-target", *LOSSES, *(f"{x}-target" for x in LOSSES))


def row_settings(row: str) -> tuple[str, int | None, str]:
    """(loss, epochs or None for ``--epochs``, pooling) of a row name."""
    if row.startswith("floor"):
        return "angle", 0, "target" if row.endswith("-target") else "mean"
    loss, _, pooling = row.partition("-")
    return loss, None, pooling or "mean"


def split_dev(pairs: list, dev_pairs: int, seed: int) -> tuple[list, list]:
    """A seeded sample of dev, halved per language (A: fit, B: report)."""
    from tagalign.pairs.model import sample_pairs
    from tagalign.pairs.model import split_dev as halves  # `pairs train --fit-split 0.5`

    pairs = sample_pairs([p for p in pairs if p.label is not None], dev_pairs or None, seed)
    return halves(pairs, 0.5, seed)


def describe(name: str, pairs: list) -> str:
    langs = Counter(p.language for p in pairs)
    labels = Counter(int(round(p.label)) for p in pairs)
    return (f"{name}: {len(pairs)} pairs; " + ", ".join(f"{k} {v}" for k, v in
                                                          sorted(langs.items()))
            + "; labels " + ", ".join(f"{k}:{v}" for k, v in sorted(labels.items())))


def load_data(args: argparse.Namespace) -> tuple[list, list, list]:
    from tagalign.pairs.data import load_comedi
    from tagalign.pairs.model import sample_pairs
    from tagalign.records import InputReport

    quiet = InputReport(stream=open("/dev/null", "w"))  # noqa: SIM115 - counts only
    train = [p for p in load_comedi(args.data / "train", quiet) if p.label is not None]
    train = sample_pairs(train, args.limit_pairs or None, args.seed)
    dev_a, dev_b = split_dev(load_comedi(args.data / "dev", quiet), args.dev_pairs, args.seed)
    return train, dev_a, dev_b


def run_row(args: argparse.Namespace) -> dict:
    """One row in this process: build, train (or not), fit cuts on A, score B."""
    from tagalign.pairs.metrics import evaluate
    from tagalign.pairs.model import PairScorer, train
    from tagalign.runtime import set_threads

    set_threads(args.threads)
    loss, epochs, pooling = row_settings(args.row)
    params = {"base_model": args.base_model, "loss": loss, "pooling": pooling,
              "epochs": args.epochs if epochs is None else epochs,
              "max_seq_length": args.max_seq_length, "lr": args.lr,
              "batch_size": args.batch_size, "seed": args.seed,
              "train_layers": None if args.train_layers < 0 else args.train_layers,
              "limit_pairs": None, "train_markers": not args.frozen_markers}
    train_pairs, dev_a, dev_b = load_data(args)
    scorer = PairScorer.build(params, device=args.device)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        train(scorer, train_pairs, dev_a, Path(work),
              on_epoch=lambda e: print(f"  [{args.row}] epoch {e['epoch']}: loss "
                                       f"{e['train_loss']}, dev-A Spearman "
                                       f"{e['spearman']:.3f}", flush=True))
    train_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    labels, scores = scorer.predict(dev_b)
    pps = len(dev_b) / (time.perf_counter() - t1)
    result = evaluate([p.label for p in dev_b], labels, [p.language for p in dev_b], scores)
    return {"row": args.row, "base_model": args.base_model, "loss": loss if params["epochs"]
            else "-", "pooling": params["pooling"], "epochs": params["epochs"],
            "train_pairs": len(train_pairs) if params["epochs"] else 0,
            "max_seq_length": args.max_seq_length, "train_layers": params["train_layers"],
            "lr": args.lr, "alpha": {k: v["alpha"] for k, v in result["languages"].items()},
            "mean_alpha": result["mean_alpha"], "spearman": result["spearman"],
            "train_s": train_s, "pairs_per_s": pps, "peak_rss_gb": peak_rss_gb(),
            "device": scorer.model.device.type, "history": scorer.history,
            "markers": "trained" if params["train_markers"] or params["train_layers"] is None
            else "frozen", "load_1min": os.getloadavg()[0]}


def print_table(rows: list[dict]) -> None:
    langs = sorted({k for r in rows for k in r["alpha"]})
    head = ["row", "model", "loss", "pool", "ep", "pairs", "seq", "layers", "markers"] + \
        [x[:3] for x in langs] + ["mean α", "ρ", "train s", "pairs/s", "RSS GB"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [r["row"], r["base_model"], r["loss"], r["pooling"], str(r["epochs"]),
                 str(r["train_pairs"]), str(r["max_seq_length"]),
                 "-" if not r["epochs"] else
                 "all" if r["train_layers"] is None else str(r["train_layers"]),
                 "-" if not r["epochs"] else r.get("markers", "frozen")]
        cells += [f"{r['alpha'].get(x, float('nan')):.3f}" for x in langs]
        cells += [f"**{r['mean_alpha']:.3f}**", f"{r['spearman']:.3f}", f"{r['train_s']:.0f}",
                  f"{r['pairs_per_s']:.1f}", f"{r['peak_rss_gb']:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print("\ntrain s: fine-tuning plus the dev-A pass and cut-point fit (the floor: only "
          "those); pairs/s: prediction on dev half B.")
    print("\nPublished anchors (CoMeDi test, mean alpha over 7 languages; ours: dev half B):")
    for name, value in ANCHORS:
        print(f"  {value:.3f}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA / "comedi")
    ap.add_argument("--base-model", default="e5-small")
    ap.add_argument("--rows", default="floor,angle,cosent,contrastive",
                    help=f"comma-separated, of {', '.join(ROWS)}")
    ap.add_argument("--limit-pairs", type=int, default=3000, help="0: all train pairs")
    ap.add_argument("--dev-pairs", type=int, default=3000, help="0: all dev pairs")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-seq-length", type=int, default=96)
    ap.add_argument("--train-layers", type=int, default=3, help="-1: all layers")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--frozen-markers", action="store_true",
                    help="train_markers=false: markers keep their resize-time rows")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    ap.add_argument("--out", type=Path, default=Path("runs/ordinal_wic/results.jsonl"))
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--table-only", action="store_true", help="print the table of --out")
    args = ap.parse_args()
    if args.row:
        print(json.dumps(run_row(args)), flush=True)
        return
    if not args.table_only:
        train, dev_a, dev_b = load_data(args)
        for name, pairs in (("train sample", train), ("dev half A (fit)", dev_a),
                            ("dev half B (report)", dev_b)):
            print(describe(name, pairs), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for row in args.rows.split(","):
            if row not in ROWS:
                sys.exit(f"unknown row {row!r}; use {', '.join(ROWS)}")
            cmd = [sys.executable, "-m", __spec__.name, "--row", row, "--data", str(args.data),
                   "--base-model", args.base_model, "--limit-pairs", str(args.limit_pairs),
                   "--dev-pairs", str(args.dev_pairs), "--epochs", str(args.epochs),
                   "--max-seq-length", str(args.max_seq_length), "--lr", str(args.lr),
                   "--train-layers", str(args.train_layers), "--seed", str(args.seed),
                   "--batch-size", str(args.batch_size), "--threads", str(args.threads)]
            cmd += ["--frozen-markers"] if args.frozen_markers else []
            cmd += ["--device", args.device] if args.device else []
            proc = subprocess.run(cmd, capture_output=True, text=True)
            sys.stderr.write(proc.stderr[-2000:] if proc.returncode else "")
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            for x in proc.stdout.splitlines():
                if not x.startswith("{"):
                    print(x, flush=True)
            if proc.returncode or not lines:
                print(f"row {row} failed (exit {proc.returncode})", flush=True)
                continue
            with open(args.out, "a", encoding="utf-8") as fh:
                fh.write(lines[-1] + "\n")
            r = json.loads(lines[-1])
            print(f"{row}: mean alpha {r['mean_alpha']:.3f}, Spearman {r['spearman']:.3f}, "
                  f"train {r['train_s']:.0f} s, {r['pairs_per_s']:.1f} pairs/s", flush=True)
    rows = [json.loads(x) for x in args.out.read_text("utf-8").splitlines() if x.strip()]
    print_table(rows)


if __name__ == "__main__":
    main()
