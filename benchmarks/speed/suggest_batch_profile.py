#!/usr/bin/env python
"""Where a batch suggest spends its time (issue 18), stage by stage, and records/s.

Loads a trained hybrid project and a seeded sample of dev records (``--limit-dev``, seed
``--seed``; never a file prefix: dev is sorted by language and type), then runs the
pipeline's stages one after another on batches of ``--batch`` records, one thread of
control (the serial path, parts off), timing each stage's wall and process CPU seconds:
the language guess with the analyzer, TF-IDF, the encoder, each source, feature building
(merge + agreement), the ranker, top k and the reasons. Last, the same records through
`Tagger.tag` as a user calls it (large batches split into parts on threads) for the
records/s figure.

    python -m benchmarks.speed.suggest_batch_profile --project runs/hybrid-full [--limit-dev 2000]
        [--set omikuji.beam_size=5]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from benchmarks._common import (
    add_project_dev_args,
    add_search_args,
    project_and_dev,
    set_search,
    suggestions,
)
from tagalign.runtime import Runtime
from tagalign.suggest.fusion import top_k
from tagalign.suggest.sources.base import Batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_project_dev_args(ap, limit_dev=2000)
    ap.add_argument("--batch", type=int, default=1000)
    add_search_args(ap)
    args = ap.parse_args()

    project, dev = project_and_dev(args, Runtime(compile_ranker=args.compile_ranker))
    set_search(project, args.set)
    pipe = project.recipe.pipeline
    suggestions(project, dev[:200], limit=20)  # warm-up
    wall: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)

    def timed(name, fn, *a):
        w, c = time.perf_counter(), time.process_time()
        out = fn(*a)
        wall[name] += time.perf_counter() - w
        cpu[name] += time.process_time() - c
        return out

    an = pipe.analyzer
    src = [s.name for s in pipe.sources]
    n_rows = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, len(dev), args.batch):
        recs = dev[start:start + args.batch]
        batch = timed("language + analyzer", Batch.tokenised, recs, an)
        langs = batch.languages
        batch.tfidf = timed("tfidf", pipe.featurizer.transform, batch.tokens, langs)
        if pipe.encoder is not None:
            batch.embeddings = timed("encoder", pipe.encoder.encode, [x.text for x in recs])
            if any(s.embeds_titles for s in pipe.sources):  # the label index's title query
                batch.title_embeddings = timed("encoder: titles", pipe.encoder.encode,
                                               [x.title for x in recs])
        cands = [timed(f"source {s.name}", s.candidates, batch) for s in pipe.sources]
        rows, cols, X, names, support = timed("features", pipe.features, batch, cands)
        scores = timed("ranker", pipe.ranker.predict, X, names, 1)  # the project's weights: 0
        ranked = timed("top k", top_k, rows, cols, scores, len(batch), 20)
        timed("reasons", lambda b=batch, rk=ranked, sp=support: [
            pipe._suggestions(b, i, [(c, s, [n for n, on in zip(src, sp[j], strict=True)
                                             if on]) for c, s, j in row])
            for i, row in enumerate(rk)])
        n_rows += len(rows)
    total_w, total_c = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nserial path, batches of {args.batch}: {len(dev) / total_w:.0f} records/s, "
          f"{n_rows / len(dev):.0f} candidates per record")
    print(f"{'stage':<20}{'wall s':>8}{'share':>7}{'cpu s':>8}{'ms/rec':>8}")
    for name in wall:
        print(f"{name:<20}{wall[name]:8.2f}{wall[name] / total_w:7.0%}{cpu[name]:8.2f}"
              f"{1000 * wall[name] / len(dev):8.2f}")
    print(f"{'total':<20}{total_w:8.2f}{1:7.0%}{total_c:8.2f}{1000 * total_w / len(dev):8.2f}")
    t0, c0 = time.perf_counter(), time.process_time()
    suggestions(project, dev, limit=20)
    w, c = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nTagger.tag (parts on threads): {len(dev)} records in {w:.1f} s = "
          f"{len(dev) / w:.0f} records/s, cpu {c:.1f} s")


if __name__ == "__main__":
    main()
