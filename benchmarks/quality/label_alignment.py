#!/usr/bin/env python
"""Issue 66 benchmark: the contrastive record ↔ label encoder alone, by bucket — does
label-side dropout (``embed_label_dropout``) make its label rows for headings without
records as good as those for headings with them?

Protocol. A seeded ``--limit-train`` sample of train (never a file prefix); of the subjects
both it and the dev sample carry, a seeded ``--simulated-new`` are stripped from every
training record's gold (`benchmarks.quality.tail.choose_withheld` / ``strip``: the records
stay, the vocabulary keeps the headings). The hybrid's static encoder
(`tagalign.train.static_model.train_static_encoder`, the hybrid's defaults but
``label_dropout``) is trained on those records once per ``--dropout`` value, and the
label index alone ranks dev: every subject's label row (`tagalign.suggest.sources.labels.
subject_rows`: German label, English averaged in) searched exactly (all 204,569 rows, no
inverted lists, so the figure is the encoder's, not the index's) with each dev record's
text embedding, top 20. Printed per variant: micro recall@5/10/20 of dev's gold by bucket
(unseen / rare / common, counted in the stripped training records; the withheld subjects
left out of the buckets), by language, and of exactly the withheld subjects (simulated
new). The *raw* row is the same encoder's architecture and tokenizer untrained (random
token vectors): what the contrastive training adds. Dev: a seeded ``--limit-dev`` sample,
its languages printed.

    python -m benchmarks.quality.label_alignment [--limit-train 20000] [--limit-dev 3000] \\
        [--dropout 0 0.3] [--simulated-new 1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks._common import add_data_args, seeded_sample
from benchmarks.quality.tail import choose_withheld, strip
from tagalign.encode.static import StaticEncoderConfig
from tagalign.evaluate.frequency import frequency_report, subject_counts, subject_recall
from tagalign.index import VectorIndex
from tagalign.records import Record, read_records
from tagalign.suggest.sources.labels import subject_rows
from tagalign.vocab import Vocabulary, load_vocabulary

KS = (5, 10, 20)


def label_rankings(encoder, vocab: Vocabulary, dev: list[Record], depth: int = 20
                   ) -> dict[str, list[str]]:
    """Each dev record's ``depth`` subjects whose label rows are nearest its text (an exact
    index of every subject's row)."""
    index = VectorIndex("flat").build(subject_rows(vocab, encoder))
    _, hits = index.search(encoder.encode([r.text for r in dev]), depth)
    return {rec.id: [vocab.subjects[i].id for i in row.tolist() if i >= 0]
            for rec, row in zip(dev, hits, strict=True)}


def raw_encoder(train: list[Record], vocab: Vocabulary, config: StaticEncoderConfig):
    """The encoder's tokenizer and architecture with untrained (random) token vectors."""
    import torch
    from sentence_transformers import SentenceTransformer

    from tagalign.encode.static import StaticEmbeddingEncoder
    from tagalign.train.static_model import capped, untrained_module

    torch.manual_seed(config.seed)
    module = untrained_module(capped(train, config.max_records, config.seed), vocab, config)
    return StaticEmbeddingEncoder(SentenceTransformer(modules=[module], device="cpu"))


def figures(ranked: dict[str, list[str]], dev: list[Record], counts: Counter[str],
            withheld: set[str]) -> dict:
    kept = [dataclasses.replace(r, subjects=[s for s in r.subjects if s not in withheld])
            for r in dev]
    return {"buckets": frequency_report(kept, ranked, counts, KS),
            "simulated_new": subject_recall(dev, ranked, withheld, KS)}


def _r(m: dict | None) -> str:
    if not m or m.get("recall@20") is None:
        return f"{'–':>8}{'–':>8}{0:>7}"
    return f"{m['recall@5']:8.4f}{m['recall@20']:8.4f}{m['gold']:>7}"


def print_table(results: dict[str, dict]) -> None:
    print(f"\n{'encoder':<22}{'part':<16}{'R@5':>8}{'R@20':>8}{'gold':>7}")
    for name, res in results.items():
        b = res["buckets"]
        for part in ("unseen", "rare", "common"):
            print(f"{name:<22}{part:<16}{_r(b['overall'][part])}")
            name = ""
        for lang in sorted(b["by_language"]):
            print(f"{'':<22}{'unseen ' + lang:<16}{_r(b['by_language'][lang]['unseen'])}")
        print(f"{'':<22}{'simulated-new':<16}{_r(res['simulated_new']['overall'])}")
        print(f"{'':<22}{'training, s':<16}{res['seconds']:8.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--limit-train", type=int, default=20_000)
    ap.add_argument("--limit-dev", type=int, default=3_000)
    ap.add_argument("--seed", type=int, default=0, help="samples and withheld subjects")
    ap.add_argument("--simulated-new", type=int, default=1_000)
    ap.add_argument("--dropout", type=float, nargs="+", default=[0.0, 0.3],
                    help="embed_label_dropout values, each trained once (0: today's)")
    ap.add_argument("--no-raw", action="store_true", help="skip the untrained row")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from tagalign.train.static_model import train_static_encoder

    vocab = load_vocabulary(args.vocab)
    train = seeded_sample(list(read_records(args.train, vocab=vocab)), args.limit_train,
                          args.seed)
    train = [r for r in train if r.subjects]
    dev = seeded_sample([r for r in read_records(args.dev, vocab=vocab) if r.subjects],
                        args.limit_dev, args.seed)
    withheld = set(choose_withheld(train, dev, args.simulated_new,
                                   np.random.default_rng(args.seed)))
    stripped, stats = strip(train, withheld)
    stripped = [r for r in stripped if r.subjects]
    counts = subject_counts(stripped)
    langs = Counter(r.language for r in dev)
    print(f"train {len(train)} records (seed {args.seed}), {len(withheld)} subjects withheld "
          f"({stats['records_touched']} records touched, {len(stripped)} keep gold); dev "
          f"{len(dev)} (" + ", ".join(f"{k} {n}" for k, n in langs.most_common()) + f"); "
          f"vocabulary {len(vocab)}")
    base = StaticEncoderConfig()
    encoders = {} if args.no_raw else {"raw (untrained)": lambda: raw_encoder(stripped, vocab,
                                                                             base)}
    for p in args.dropout:
        encoders[f"label_dropout={p:g}"] = lambda p=p: train_static_encoder(
            stripped, vocab, dataclasses.replace(base, label_dropout=p))
    results: dict[str, dict] = {}
    for name, make in encoders.items():
        t = time.perf_counter()
        enc = make()
        seconds = time.perf_counter() - t
        results[name] = {**figures(label_rankings(enc, vocab, dev), dev, counts, withheld),
                         "seconds": seconds}
        print_table({name: results[name]})  # as it goes; all of them again at the end
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
