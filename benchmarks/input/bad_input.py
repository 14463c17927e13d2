#!/usr/bin/env python
"""Cost and yield of per-line decoding (issue 12).

1. Speed: dev.jsonl.gz (all 19,949 records) read by `read_records` (bytes decoded line by
   line, `tagalign.io.LineReader`) against the reader it replaced (one UTF-8 text stream
   over the gzip file, which stops at the first bad byte), best of ``--repeat`` runs.
2. Yield: the same file damaged with a fixed seed: ``--bad`` lines replaced by garbage
   (half a stray 0xff byte, half broken JSON) at random positions and the gzip stream cut
   at a random point; prints how many good records before the cut came out, in order.
3. Vocabulary: gnd-subjects.tsv.gz through the per-line loader.

    python -m benchmarks.input.bad_input [--repeat 3] [--bad 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import tempfile
import time
import zlib
from pathlib import Path

from benchmarks._common import DATA
from tagalign.records import InputReport, read_records
from tagalign.records.loaders import record_from_json
from tagalign.vocab import load_vocabulary


class OldReaderStopped(Exception):
    pass


def old_reader(path: Path) -> int:
    """The reader before issue 12: a UTF-8 text stream over the whole gzip file (a bad JSON
    line was skipped; a bad byte or a cut ended the stream, and with it the run)."""
    n = 0
    try:
        with io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8") as fh:
            for line in fh:
                try:
                    record_from_json(json.loads(line))
                except ValueError:
                    continue
                n += 1
    except (UnicodeDecodeError, EOFError) as exc:
        raise OldReaderStopped(f"{type(exc).__name__} after {n} records") from None
    return n


def best(fn, repeat: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bad", type=int, default=200, help="garbage lines to inject")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    quiet = lambda: InputReport(stream=io.StringIO())  # noqa: E731
    t_old, n_old = best(lambda: old_reader(args.dev), args.repeat)
    t_new, n_new = best(lambda: sum(1 for _ in read_records(args.dev, report=quiet())),
                        args.repeat)
    print(f"speed: {args.dev.name}, {n_new} records (old reader {n_old}), best of {args.repeat}")
    print(f"  old text-stream reader   {t_old:6.2f} s  {n_old / t_old:8.0f} rec/s")
    print(f"  per-line read_records    {t_new:6.2f} s  {n_new / t_new:8.0f} rec/s "
          f"({t_new / t_old - 1:+.1%})")

    with gzip.open(args.dev, "rb") as fh:
        lines = fh.read().splitlines()
    rnd = random.Random(args.seed)
    bad_at = set(rnd.sample(range(len(lines)), args.bad))
    damaged = [(b'{"id": "broken", "title": "cut' if i % 2 else line[:40] + b"\xff" + line[40:])
               if i in bad_at else line for i, line in enumerate(lines)]
    packed = gzip.compress(b"\n".join(damaged) + b"\n")
    cut = rnd.randrange(len(packed) // 4, len(packed) * 3 // 4)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "damaged.jsonl.gz"
        path.write_bytes(packed[:cut])
        report = quiet()
        got = [r.id for r in read_records(path, report=report)]
        try:  # the anchor: the old reader on the same file
            anchor = f"finished?! {old_reader(path)} records"
        except OldReaderStopped as exc:
            anchor = f"stops with {exc}"
    # the lines wholly inside the bytes before the cut (the last, partial line is lost)
    complete = zlib.decompressobj(31).decompress(packed[:cut]).count(b"\n")
    expected = [json.loads(line)["id"] for i, line in enumerate(lines[:complete])
                if i not in bad_at]
    bad_before = sum(1 for i in bad_at if i < complete)
    print(f"yield: {args.bad} garbage lines at seeded positions (seed {args.seed}), gzip cut "
          f"at byte {cut:,} of {len(packed):,} ({complete:,} whole lines before it)")
    print(f"  good records wholly before the cut: {len(expected)}; came out: {len(got)}, "
          f"same ids in the same order: {got == expected}")
    print(f"  problems reported: {report.n_skipped} (garbage lines before the cut "
          f"{bad_before} + the cut 1)")
    print(f"  issue's anchor: the old reader {anchor} (and `suggest` then wrote no file)")
    print(f"  last message: {report.skipped[-1].replace(str(path), 'damaged.jsonl.gz')}")

    t0 = time.perf_counter()
    vocab = load_vocabulary(args.vocab, report=quiet())
    print(f"vocabulary: {args.vocab.name} per-line loader {time.perf_counter() - t0:.2f} s, "
          f"{len(vocab)} subjects")


if __name__ == "__main__":
    main()
