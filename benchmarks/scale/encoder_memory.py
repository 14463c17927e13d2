#!/usr/bin/env python
"""What the hybrid's encoder phase adds to a training's peak memory, step by step (issue 48).

At 1M records the encoder phase set the training's peak: its pair dataset's conversion
(a record's text once per gold subject) and its hard-negative mining. This benchmark
measures both on a seeded sample of records, each variant in a fresh process, as the peak
RSS during the step over the RSS before it (Linux ``VmHWM``, reset before the step through
``/proc/self/clear_refs``) and the RSS the step leaves:

- ``dataset:P`` — the record ↔ label, record ↔ record and label ↔ label training pairs
  (`training_pairs`) converted to a `datasets.Dataset` ``P`` rows at a time
  (`text_dataset`; ``P`` = 0: one `Dataset.from_dict`, the old way);
- ``mine:C`` — `hard_negative_sets` in pieces of ``C`` record ↔ label pairs (one hard
  negative, the default hybrid's), with an untrained model of the hybrid's size: mining's
  memory depends on the pairs and the corpus, not on what the model learned.

    python -m benchmarks.scale.encoder_memory --records runs/scale48/records-1000000.jsonl.gz \\
        --sample 30000 [--variants dataset:0,dataset:50000,mine:250000,mine:100000]

The sample: ``--sample`` records with gold subjects, drawn with ``--seed`` from the file
(`seeded_records`; the 1M file's records carry 8.2 subjects each, the encoder learns from
a sample of 100,000 of them), the 205k GND vocabulary. The added memory grows with the
pairs: at 100,000 records there are about 3.3 times the pairs of 30,000.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks._common import DATA, peak_rss_gb, seeded_records


def run_variant(args: argparse.Namespace, variant: str) -> dict:
    """One variant in this process: the sample, its pairs, then the measured step."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    from tagalign.encode.static import StaticEncoderConfig
    from tagalign.train import static_model as sm
    from tagalign.train.phases import rss_gb
    from tagalign.vocab.loaders import load_vocabulary

    kind, _, size = variant.partition(":")
    vocab = load_vocabulary(args.vocab)
    records = seeded_records(args.records, vocab, args.sample, args.seed)
    config = StaticEncoderConfig()
    labels = [s.label("de") for s in vocab.subjects]
    labels += [s.labels["en"] for s in vocab.subjects if "en" in s.labels]
    tokenizer = sm.train_tokenizer([r.text for r in records] + labels, config.vocab_size)
    model = SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_dim=config.dim)],
                                device="cpu")
    anchors, positives, n_pairs = sm.training_pairs(records, vocab, 13)
    sm.release_memory()
    with open("/proc/self/clear_refs", "w") as fh:  # the peak (VmHWM) restarts at the RSS now
        fh.write("5")
    before_peak, before = peak_rss_gb(), rss_gb()
    if kind == "dataset":
        if int(size):
            out = sm.text_dataset({"anchor": anchors, "positive": positives}, int(size))
        else:
            from datasets import Dataset

            out = Dataset.from_dict({"anchor": anchors, "positive": positives})
        rows = len(out)
    elif kind == "mine":
        sets = sm.hard_negative_sets(model, anchors, positives, n_pairs, 1, 13, int(size))
        rows = len(sets["triplets"])
    else:
        raise SystemExit(f"unknown variant {variant!r} (dataset:P or mine:C)")
    return {"variant": variant, "records": len(records), "pairs": len(anchors),
            "record_label_pairs": n_pairs, "rows": rows,
            "before_gb": round(before, 2), "added_peak_gb": round(peak_rss_gb() - before_peak, 2),
            "left_gb": round(rss_gb() - before, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=Path, required=True)
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
    ap.add_argument("--sample", type=int, default=30_000)
    ap.add_argument("--seed", type=int, default=48)
    ap.add_argument("--variants", default="dataset:0,dataset:50000,mine:250000,mine:100000")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_variant(args, args.one)))
        return
    print(f"{args.sample:,} records with subjects drawn with seed {args.seed} from "
          f"{args.records}; each variant in a fresh process")
    print("| variant | pairs (record ↔ label) | rows made | RSS before (GB) | added peak (GB) "
          "| left (GB) |")
    print("|---|---|---|---|---|---|")
    for variant in args.variants.split(","):
        child = subprocess.run([sys.executable, "-m", __spec__.name, *sys.argv[1:], "--one",
                                variant], capture_output=True, text=True, check=True)
        r = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"| {r['variant']} | {r['pairs']:,} ({r['record_label_pairs']:,}) | "
              f"{r['rows']:,} | {r['before_gb']} | {r['added_peak_gb']} | {r['left_gb']} |",
              flush=True)


if __name__ == "__main__":
    main()
