#!/usr/bin/env python
"""`tagalign suggest` on Ray gives the local run's lines (issue 48), on a project of any size.

Runs the command twice on one input, as a user would: locally (one file) and with
``--engine ray --num-workers N`` (a folder of shards), both with ``--mmap`` unless
``--no-mmap``, each under ``/usr/bin/time -v``; then reads every line of both outputs, keyed
by record id, and prints wall seconds, records/s and the peak RSS of each command (the
driver's: Ray's workers are other processes), and how many records differ (ids missing on
either side, or any field of a line unequal). Exit status 1 when any differs.

    python -m benchmarks.checks.engines_equal --project runs/scale48/hybrid-1000000 \\
        [--input dev.jsonl.gz] [--workers 2] [--out runs/engines-equal]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks._common import DATA


def lines(path: Path) -> dict[str, dict]:
    """Every output line by record id (a folder: its ``*.jsonl`` shards)."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    out: dict[str, dict] = {}
    for f in files:
        with f.open(encoding="utf-8") as fh:
            for line in fh:
                d = json.loads(line)
                out[d["id"]] = d
    return out


def run(cmd: list[str], log: Path) -> dict[str, float]:
    """The command under /usr/bin/time -v: wall seconds and peak RSS (GiB); fails loudly."""
    with log.open("w") as fh:
        done = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=fh, stderr=subprocess.STDOUT)
    text = log.read_text()
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}); see {log}")
    h, m, s = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text).groups()
    wall = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return {"wall_s": wall, "peak_gib": rss / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--input", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--no-mmap", dest="mmap", action="store_false")
    ap.add_argument("--out", type=Path, default=Path("runs/engines-equal"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    local, ray = args.out / "local.jsonl", args.out / "ray"
    local.unlink(missing_ok=True)
    shutil.rmtree(ray, ignore_errors=True)
    base = [sys.executable, "-m", "tagalign.cli.main", "suggest", str(args.project),
            "--input", str(args.input), "--limit", str(args.limit)]
    base += ["--mmap"] if args.mmap else []
    figures = {
        "local": run([*base, "--output", str(local)], args.out / "local.log"),
        f"ray, {args.workers} workers": run([*base, "--output", f"{ray}/", "--engine", "ray",
                                              "--num-workers", str(args.workers)],
                                             args.out / "ray.log"),
    }
    a, b = lines(local), lines(ray)
    for name, f in figures.items():
        print(f"{name}: {len(a)} records in {f['wall_s']:.1f} s (load and start-up included) = "
              f"{len(a) / f['wall_s']:.0f} records/s; peak RSS of the command "
              f"{f['peak_gib']:.2f} GiB")
    differ = sorted(set(a) ^ set(b)) + [k for k in a if k in b and a[k] != b[k]]
    print(f"records: local {len(a)}, ray {len(b)}; differing: {len(differ)}"
          + (f" (first: {differ[:3]})" if differ else " (every line the same)"))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
