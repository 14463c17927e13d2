#!/usr/bin/env python
"""Issue 33: English label variants mined from English training records, checked on
held-out training records (dev is not read).

Split A of the hybrid's stacking split (the records its sources learn from) is cut again:
its English records are mined on 80 % and checked on the other 20 % (a hash of the id).
Prints, per threshold: mined phrases and subjects, mining time, and on the held-out English
records the share of gold subjects the lexical source finds by labels alone and with the
mined variants, mined-only matches per record and their precision (gold share).

    python benchmarks/mined_labels.py [--min-support 3] [--precisions 0.3,0.5,0.7]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import add_data_args
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.records import read_records
from tagalign.suggest.sources.base import Batch, FitContext, record_languages
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.suggest.sources.memory import label_matrix
from tagalign.suggest.sources.mined import mine_label_variants, record_grams
from tagalign.text import Analyzer
from tagalign.train.stacking import in_holdout
from tagalign.vocab import load_vocabulary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--min-support", type=int, default=3)
    ap.add_argument("--precisions", default="0.3,0.5,0.7")
    args = ap.parse_args()
    vocab = load_vocabulary(args.vocab)
    p = HybridRecipe.defaults
    records = [r for r in read_records(args.train, vocab=vocab) if r.subjects]
    hold = np.array([in_holdout(r.id, p["holdout_fraction"], p["seed"]) for r in records])
    b = set(np.flatnonzero(hold)[: p["max_ranker_records"]].tolist())
    langs = record_languages(records)
    en = [r for i, (r, lg) in enumerate(zip(records, langs, strict=True))
          if i not in b and lg == "en"]
    check = np.array([in_holdout(r.id, 0.2, 33) for r in en])
    an = Analyzer()
    t0 = time.perf_counter()
    tokens = [an.tokens(r.text, "en") for r in en]
    print(f"split A: {len(en)} English records ({int(check.sum())} held out); "
          f"tokenised in {time.perf_counter() - t0:.0f} s")
    Y = label_matrix(en, vocab).tocsr()
    fit_i, chk_i = np.flatnonzero(~check), np.flatnonzero(check)
    plain = LabelMatcher()
    plain.fit(FitContext(vocab, an))
    chk_tok = [tokens[i] for i in chk_i]
    c = plain.candidates(Batch([en[i] for i in chk_i], ["en"] * len(chk_i), chk_tok,
                               [[] for _ in chk_i]))
    found = [set() for _ in chk_i]
    for r, s in zip(c.rows.tolist(), c.cols.tolist(), strict=True):
        found[r].add(s)
    gold = [set(Y[i].indices.tolist()) for i in chk_i]
    n_gold = sum(len(g) for g in gold)
    base = sum(len(f & g) for f, g in zip(found, gold, strict=True)) / n_gold
    no_en = np.array(["en" not in s.labels for s in vocab.subjects])
    gold_no_en = sum(no_en[list(g)].sum() for g in gold)
    print(f"held-out gold: {n_gold} ({gold_no_en / n_gold:.1%} without an English label); "
          f"found by labels alone {base:.3f}")
    grams = [record_grams(t, 3) for t in chk_tok]
    print(f"{'subjects':<9}{'prec>=':>7}{'phrases':>9}{'subj':>7}{'mine s':>8}"
          f"{'found':>7}{'no-en':>7}{'+cand/rec':>10}{'cand prec':>10}")
    for subjects in ("no-en", "all"):
        t0 = time.perf_counter()
        mined = mine_label_variants([tokens[i] for i in fit_i], Y[fit_i],
                                    min_support=args.min_support,
                                    min_precision=min(map(float, args.precisions.split(","))),
                                    subjects=no_en if subjects == "no-en" else None)
        mine_s = time.perf_counter() - t0
        for th in map(float, args.precisions.split(",")):
            table = {g: [s for s, pr in hits if pr >= th] for g, hits in mined.items()}
            table = {g: h for g, h in table.items() if h}
            hit = good = added = hit_no_en = 0
            for f, g, gr in zip(found, gold, grams, strict=True):
                extra = {s for x in gr for s in table.get(x, ())} - f
                added += len(extra)
                good += len(extra & g)
                both = (f | extra) & g
                hit += len(both)
                hit_no_en += int(no_en[list(both)].sum()) if both else 0
            n_subj = len({s for h in table.values() for s in h})
            print(f"{subjects:<9}{th:7.2f}{len(table):9d}{n_subj:7d}{mine_s:8.0f}"
                  f"{hit / n_gold:7.3f}{hit_no_en / max(gold_no_en, 1):7.3f}"
                  f"{added / len(chk_i):10.2f}{good / max(added, 1):10.3f}", flush=True)
        best = sorted(((hits[0][1], g, hits[0][0]) for g, hits in mined.items()),
                      reverse=True)
        for pr, g, s in best[:: max(len(best) // 12, 1)][:12]:
            subj = vocab.subjects[s]
            print(f"   {g!r:<32} → {subj.label('de')} / {subj.labels.get('en', '-')}"
                  f" ({pr:.2f})")


if __name__ == "__main__":
    main()
