#!/usr/bin/env python
"""MARC 21 in (issue 32): reading speed, memory on a million records, and the same records
as from JSONL.

1. Converts the shared train split (all 90,452 records) to binary MARC and to MARC-XML
   with tagalign's own writer (`record_to_marc`: 001, 008/041 language, 245 title, 520
   abstract, leader/07 and 655 for the type, gold subjects as ``650 _7 $0 (DE-588)ID $0
   https://d-nb.info/gnd/ID $a LABEL $2 gnd`` with the GND label), uncompressed.
2. Reads both back with `read_records` and prints records/s (best of ``--repeat`` runs,
   one process, one core) by the wall clock and per CPU second (the one-core rate when
   other processes share the machine), and pymarc's own `MARCReader` (which maps nothing)
   on the binary file for scale.
3. Compares every record read from each MARC copy with the one read from the JSONL, field
   by field (id, title, abstract, language, type, subjects): identical inputs make an
   identical training (docs/reproducibility.md; Omikuji aside, whose trees are unseeded).
4. Streams ``--rss-records`` (1,000,000) records through `read_records` in a fresh process
   and prints its resident memory every 100,000 records and its peak (VmHWM). The
   records are the split repeated with new ids (``ID-00``, ``ID-01``, …: the 001 of the
   converted record patched in place), written to a temporary file that is removed after.
5. ``--train-check N``: trains two small hybrids (sources without Omikuji, so training is
   deterministic) on N seeded train records, one from the JSONL and one from the MARC
   copy, and compares their suggestions (ids and scores) on 200 seeded dev records.

    python -m benchmarks.input.marc [--repeat 3] [--rss-records 1000000]
        [--rss-formats marc,marcxml] [--train-check 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import add_data_args, suggestions
from tagalign.records import InputReport, Record, read_records
from tagalign.records.marc.writer import MarcWriter, marc_bytes, record_to_marc

FIELDS = ("id", "title", "abstract", "language", "type", "subjects")
SMALL_HYBRID = {"sources": ["tfidf_knn", "emb_knn", "labels", "lexical"],
                "embed_vocab_size": 3000, "embed_dim": 32, "embed_batch_size": 128,
                "embed_label_pairs": False, "ranker_rounds": 60, "knn_k": 10}
RSS_CHILD = """
import sys, time
from tagalign.records import InputReport, read_records
n, t0, rss = 0, time.perf_counter(), []
def now_mb():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20
for rec in read_records(sys.argv[1], report=InputReport(strict=True)):
    n += 1
    if n % 100_000 == 0:
        rss.append(round(now_mb(), 1))
# VmHWM, not ru_maxrss: the latter keeps the parent's high-water mark across fork + exec
with open("/proc/self/status") as fh:
    peak = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM")) / 1024
print(n, round(time.perf_counter() - t0, 1), round(peak, 1), *rss)
"""


def convert(records: list[Record], labels, out: Path, fmt: str) -> float:
    t0 = time.perf_counter()
    with open(out, "wb") as fh:
        writer = MarcWriter(fh, fmt)
        for rec in records:
            writer.write(record_to_marc(rec, labels))
        writer.close()
    return time.perf_counter() - t0


def best_read(path: Path, repeat: int) -> tuple[float, float, list[Record]]:
    """Best wall and CPU seconds of ``repeat`` reads (CPU time: the one-core rate even when
    other processes share the cores), and the records."""
    walls, cpus, got = [], [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        got = list(read_records(path, report=InputReport(strict=True)))
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus), got


def pymarc_read(path: Path) -> float:
    """pymarc's own reader, records per CPU second (no mapping to a `Record`)."""
    from pymarc import MARCReader

    c0 = time.process_time()
    with open(path, "rb") as fh:
        n = sum(1 for _ in MARCReader(fh, to_unicode=True, force_utf8=True))
    return n / (time.process_time() - c0)


def compare(a: list[Record], b: list[Record]) -> dict:
    """Records of ``b`` that differ from ``a`` in each field (and in count), with the first
    such pair of values."""
    diff: dict = {"count": abs(len(a) - len(b))}
    for f in FIELDS:
        pairs = [(getattr(x, f), getattr(y, f)) for x, y in zip(a, b, strict=False)
                 if getattr(x, f) != getattr(y, f)]
        diff[f] = len(pairs)
        if pairs:
            diff[f"{f}_example"] = [str(v)[-120:] for v in pairs[0]]
    return diff


def million(records: list[Record], labels, out: Path, fmt: str, n: int) -> None:
    """``n`` records: the split repeated, each copy with new ids (``-00``, ``-01``, …)."""
    from dataclasses import replace

    tail = b"\x1e" if fmt == "marc" else b"</controlfield>"
    base = [marc_bytes(record_to_marc(replace(r, id=r.id + "-00"), labels), fmt)
            for r in records]
    with open(out, "wb") as fh:
        writer = MarcWriter(fh, fmt)
        written = 0
        for k in range(n // len(base) + 1):
            old, new = b"-00" + tail, f"-{k:02d}".encode() + tail
            for data in base[:n - written]:
                fh.write(data.replace(old, new, 1) if k else data)
            written = min(n, written + len(base))
        writer.close()


def rss_run(path: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", RSS_CHILD, str(path)], capture_output=True,
                         text=True, check=True)
    n, seconds, peak, *series = res.stdout.split()
    return {"records": int(n), "seconds": float(seconds), "peak_rss_mb": float(peak),
            "rss_mb_every_100k": [float(x) for x in series]}


def train_check(train: list[Record], marc_train: list[Record], dev: list[Record],
                vocab_path: Path, n: int, seed: int) -> dict:
    from tagalign.project import Project
    from tagalign.vocab import load_vocabulary

    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(train), n, replace=False))
    dev_pick = [dev[i] for i in sorted(np.random.default_rng(seed + 1).choice(len(dev), 200,
                                                                             replace=False))]
    vocab = load_vocabulary(vocab_path)
    results = []
    with tempfile.TemporaryDirectory(prefix="marc-train-") as tmp:
        for name, recs in (("jsonl", train), ("marc", marc_train)):
            project = Project.create(Path(tmp) / name, vocab, "hybrid", SMALL_HYBRID)
            t0 = time.perf_counter()
            project.train([recs[i] for i in pick])
            print(f"  trained from {name} in {time.perf_counter() - t0:.0f} s", flush=True)
            results.append([[(s.id, round(s.score, 9)) for s in row]
                            for row in suggestions(project, dev_pick, limit=20)])
    same = sum(a == b for a, b in zip(*results, strict=True))
    return {"train_records": n, "dev_records": len(dev_pick), "same_suggestions": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_args(ap)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rss-records", type=int, default=1_000_000)
    ap.add_argument("--rss-formats", default="marc")
    ap.add_argument("--train-check", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from tagalign.vocab import load_vocabulary

    records = list(read_records(args.train))
    vocab = load_vocabulary(args.vocab)
    labels = lambda sid: vocab.label(sid, "de") if sid in vocab else None  # noqa: E731
    out: dict = {"records": len(records)}
    with tempfile.TemporaryDirectory(prefix="marc-bench-") as tmp:
        copies = {}
        for fmt, name in (("marc", "train.mrc"), ("marcxml", "train.xml")):
            path = Path(tmp) / name
            seconds = convert(records, labels, path, fmt)
            wall, cpu, got = best_read(path, args.repeat)
            copies[fmt] = got
            out[fmt] = {"file_mb": round(path.stat().st_size / 2**20, 1),
                        "write_records_per_s": round(len(records) / seconds),
                        "read_records_per_s": round(len(got) / wall),
                        "read_records_per_cpu_s": round(len(got) / cpu),
                        "differs_from_jsonl": compare(records, got)}
            if fmt == "marc":
                out[fmt]["pymarc_MARCReader_records_per_cpu_s"] = round(pymarc_read(path))
            print(fmt, json.dumps(out[fmt]), flush=True)
        for fmt in args.rss_formats.split(",") if args.rss_records else []:
            path = Path(tmp) / f"million.{'mrc' if fmt == 'marc' else 'xml'}"
            million(records, labels, path, fmt, args.rss_records)
            out[f"rss_{fmt}"] = {"file_mb": round(path.stat().st_size / 2**20), **rss_run(path)}
            path.unlink()
            print(f"rss {fmt}", json.dumps(out[f"rss_{fmt}"]), flush=True)
        if args.train_check:
            dev = list(read_records(args.dev))
            out["train_check"] = train_check(records, copies["marc"], dev, args.vocab,
                                             args.train_check, args.seed)
            print("train check", json.dumps(out["train_check"]), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
