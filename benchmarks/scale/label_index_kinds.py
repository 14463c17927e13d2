#!/usr/bin/env python
"""The label index of a trained hybrid built again in other kinds (issue 48): what a
compressed index (``ivfsq8``: one byte a dimension) costs the labels source.

Loads a saved project (``--mmap``), builds its ``labels`` source's index again from the
project's own encoder and vocabulary (every preferred and alternative label a row, made as
the source's fit makes them) in each kind of ``--kinds``, and queries each with the
embeddings of a seeded sample of ``--limit-dev`` dev records (never a file prefix: dev is
sorted by language and type; the sample's make-up is printed). Prints per kind: build
seconds (the rows' encoding, made once, included), the index's bytes, queries/s (one
thread), and recall@``top_k`` of the subjects the source returns against an exact
(``flat``) index's. Then each kind is swapped into the
loaded project and the sample is tagged (20 suggestions, as `suggest_speed.py`): dev avg
R@5..20 with each kind beside the project's own index. The ranker learned on the saved
kind's scores, so a kind that changes them much would also want a retraining.

    python -m benchmarks.scale.label_index_kinds --project runs/scale15/hybrid-1000000
        [--kinds flat,ivf,ivfsq8] [--limit-dev 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks._common import DATA, peak_rss_gb, seeded_sample, suggestions
from tagalign.evaluate.metrics import group_metrics
from tagalign.index import VectorIndex
from tagalign.project import Project
from tagalign.records import read_records
from tagalign.runtime import Runtime
from tagalign.suggest.sources.labels import alt_label_rows, subject_rows, text_rows


def index_bytes(index: VectorIndex) -> int:
    """An index's bytes as faiss writes it (a memory-mapped one serialises its lists
    empty: measure it by its files)."""
    import faiss

    return int(faiss.serialize_index(index.index_).nbytes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--kinds", default="flat,ivf,ivfsq8")
    ap.add_argument("--limit-dev", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    t0 = time.perf_counter()
    project = Project.load(args.project, mmap=True,
                           runtime=Runtime(compile_ranker=True))
    print(f"project loaded in {time.perf_counter() - t0:.1f} s (memory-mapped)", flush=True)
    pipeline = project.recipe.pipeline_
    source = next(s for s in pipeline.sources if s.name == "labels")
    recs = seeded_sample(list(read_records(args.dev, vocab=project.vocab)), args.limit_dev,
                         args.seed)
    kinds = Counter(f"{r.language}/{r.type}" for r in recs)
    print(f"{len(recs)} dev records (seed {args.seed}): "
          + ", ".join(f"{k} {v}" for k, v in kinds.most_common(4)), flush=True)
    q = np.ascontiguousarray(pipeline.encoder.encode([r.text for r in recs]), np.float32)

    saved = source.index_
    labels, owners = alt_label_rows(project.vocab)
    t0 = time.perf_counter()
    lazy = [subject_rows(project.vocab, pipeline.encoder)]
    if labels:
        lazy.append(text_rows(pipeline.encoder, labels))
    # made once for every kind (the same rows the source's fit makes as its build asks)
    parts = [np.concatenate(list(part.chunks())) for part in lazy]
    encode_s = time.perf_counter() - t0
    print(f"{sum(len(p) for p in parts):,} label rows encoded in {encode_s:.0f} s", flush=True)
    found: dict[str, np.ndarray] = {}
    rows: list[dict] = []
    for kind in ["saved", *args.kinds.split(",")]:
        if kind == "saved":
            index, build_s = saved, 0.0
            mib = sum(f.stat().st_size for f in (args.project / "model/sources/labels/index")
                      .iterdir()) / 2**20
        else:
            t0 = time.perf_counter()
            index = VectorIndex(kind).build(parts)
            build_s = time.perf_counter() - t0 + encode_s
            mib = index_bytes(index) / 2**20
        source.index_ = index
        with threadpool_limits(1):
            t0 = time.perf_counter()
            _, pos, _ = source._search(q)
            qps = len(q) / (time.perf_counter() - t0)
        found[kind] = pos
        t0 = time.perf_counter()
        got = suggestions(project, recs, limit=20)
        avg_r = group_metrics([set(r.subjects) for r in recs],
                              [[s.id for s in row] for row in got])["avg_recall"]
        rows.append({"kind": kind if kind != "saved" else f"{saved.kind} (saved)",
                     "build_s": build_s, "mib": mib, "qps": qps,
                     "avg_r": avg_r, "key": kind,
                     "tag_s": time.perf_counter() - t0})
        print(rows[-1], f"peak RSS {peak_rss_gb():.2f} GB", flush=True)
        del index
    source.index_ = saved
    truth = found.get("flat")
    top_k = source.config.top_k
    print(f"\n{len(project.vocab):,} subjects, {len(project.vocab) + len(labels):,} label "
          f"rows; {len(recs)} queries, top {top_k} subjects each")
    print("| label index | build s | MiB | queries/s (1 thread) | recall@top_k vs flat | "
          "dev avg R@5..20 |\n|---|---|---|---|---|---|")
    for row in rows:
        rec = "—" if truth is None else f"{recall(found[row['key']], truth):.3f}"
        print(f"| {row['kind']} | {row['build_s']:.0f} | {row['mib']:,.0f} | {row['qps']:,.0f} "
              f"| {rec} | {row['avg_r']:.4f} |")


def recall(pos: np.ndarray, truth: np.ndarray) -> float:
    """Share of the exact index's subjects (per query) that ``pos`` holds too."""
    hit = total = 0
    for got, want in zip(pos, truth, strict=True):
        w = set(want[want >= 0].tolist())
        hit += len(w & set(got[got >= 0].tolist()))
        total += len(w)
    return hit / max(total, 1)


if __name__ == "__main__":
    main()
