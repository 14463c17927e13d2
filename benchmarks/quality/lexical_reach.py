#!/usr/bin/env python
"""Issue 66 benchmark: what the lexical matcher reaches of the tail, by matching option.

Protocol. The hybrid's lexical matcher (`tagalign.suggest.sources.lexical.LabelMatcher`,
the hybrid's defaults: German labels looked for in English texts too) is fitted on the
vocabulary alone — what it *reaches* does not depend on the training records, only its
``lex_prec`` does — and its candidates for a seeded ``--limit-dev`` sample of dev records
with gold (never a file prefix; the sample's records by language printed) are scored, per
setting of its looser matches (`tagalign.suggest.sources.loose`: ``base`` none; ``near``
a label's stems within its length + 2 tokens, ``scattered`` anywhere; ``compounds``;
``near+comp``; ``both``, scattered anywhere and compounds). Printed per setting and per
bucket of the gold (unseen 0 / rare 1–4 / common ≥ 5 training records carrying it, counted
on all of ``--train``; `tagalign.evaluate.frequency`): the share of the bucket's gold
among the matcher's candidates (unseen also by language), the candidates a record, their
precision (right candidates / candidates), the matcher's time a record (one process, the
batch's tokens made beforehand, not counted) and the seconds its loose indexes take to
build (what loading a model with them adds: `LabelMatcher.load_state`).

    python -m benchmarks.quality.lexical_reach [--limit-dev 5000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from benchmarks._common import add_data_args, seeded_sample
from tagalign.evaluate.frequency import BUCKETS, bucket_of, subject_counts
from tagalign.records import read_records
from tagalign.suggest.sources.base import Batch, FitContext
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.text import Analyzer
from tagalign.vocab import load_vocabulary

SETTINGS: dict[str, dict[str, object]] = {
    "base": {"scattered": False, "compounds": False},
    "near": {"scattered": True, "scattered_slack": 2, "compounds": False},
    "scattered": {"scattered": True, "scattered_slack": None, "compounds": False},
    "compounds": {"scattered": False, "compounds": True},
    "near+comp": {"scattered": True, "scattered_slack": 2, "compounds": True},
    "both": {"scattered": True, "scattered_slack": None, "compounds": True},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--limit-dev", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=0, help="seed of the dev sample")
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    vocab = load_vocabulary(args.vocab)
    train = list(read_records(args.train, vocab=vocab))
    counts = subject_counts(train)
    dev = seeded_sample([r for r in read_records(args.dev, vocab=vocab) if r.subjects],
                        args.limit_dev, args.seed)
    langs = Counter(r.language for r in dev)
    print(f"dev: {len(dev)} records with gold (seed {args.seed}; "
          + ", ".join(f"{n} {lg}" for lg, n in sorted(langs.items())) + f"); counts on "
          f"{len(train)} train records")
    analyzer = Analyzer()
    matcher = LabelMatcher()
    t0 = time.perf_counter()
    matcher.fit(FitContext(vocab, analyzer))
    print(f"matcher fitted on the vocabulary in {time.perf_counter() - t0:.1f} s")
    batch = Batch.tokenised(dev, analyzer)
    gold = [[(s, bucket_of(counts.get(s, 0))) for s in dict.fromkeys(r.subjects)
             if vocab.get(s) is not None] for r in dev]
    figures = {}
    for name, options in SETTINGS.items():
        t0 = time.perf_counter()
        matcher.set_matching(**options)
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        cands = matcher.candidates(batch)
        seconds = time.perf_counter() - t0
        found: list[set[str]] = [set() for _ in dev]
        for r, c in zip(cands.rows.tolist(), cands.cols.tolist(), strict=True):
            found[r].add(vocab.subjects[c].id)
        reached: Counter[tuple[str, str]] = Counter()
        total: Counter[tuple[str, str]] = Counter()
        right = 0
        for rec, g, f in zip(dev, gold, found, strict=True):
            right += sum(s in f for s, _ in g)
            for s, b in g:
                for key in ((b, "all"), (b, rec.language)):
                    total[key] += 1
                    reached[key] += s in f
        n_cands = len(cands.rows)
        share = {f"{b}/{lg}": reached[b, lg] / total[b, lg]
                 for b, lg in total if total[b, lg]}
        figures[name] = {"reached": share, "candidates_per_record": n_cands / len(dev),
                         "precision": right / max(n_cands, 1),
                         "ms_per_record": 1000 * seconds / len(dev),
                         "index_seconds": build}
        print(f"{name:10s} " + "  ".join(f"{b} {share.get(b + '/all', 0):.3f}"
                                         for b in BUCKETS)
              + f"  (unseen: de {share.get('unseen/de', 0):.3f}, en "
              f"{share.get('unseen/en', 0):.3f})  {n_cands / len(dev):.1f} candidates a "
              f"record, precision {right / max(n_cands, 1):.4f}, "
              f"{1000 * seconds / len(dev):.2f} ms a record (index {build:.1f} s)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
