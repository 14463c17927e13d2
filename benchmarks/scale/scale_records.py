#!/usr/bin/env python
"""Issue 48's records workload: 300,000 and 1,000,000 training records, as JSONL.gz and MARC.

Each file holds all 90,452 real train records (those with subjects) and synthetic records
up to its size, in a seeded shuffled order (a file prefix is a random sample, as the real
files' language-and-type order is not), written once, atomically, as:

- ``records-N.jsonl.gz`` (the JSONL layout of the shared data), and
- ``records-N.mrc.gz`` (binary MARC 21 by tagalign's writer, `record_to_marc`, 650 ``$a``
  labels from the vocabulary), so the streaming MARC reader is on the training's path.

Synthetic record i (id ``syn-NNNNNNN``) is recombined as `memory_1m.Recombination` draws
it (seed 48): the title of pool record a, the first half of the abstract of pool record b,
the second half of c's (a, b, c of one language, the pool = every real train record with
subjects); its type is a's, its gold subjects and domains the union of the three.
A seeded ``--generated-share`` (20 %) of synthetic records also carries one of
``--generated-gold`` (20,000) generated headings (`scale_vocab.gold_headings`: persons,
corporate bodies, places and works of the 1.5M-heading dump, drawn from its first
``--generated-pool`` 40,000) as gold, with the heading's label after the title (": LABEL"),
so a model trained with the 1.5M vocabulary can learn and suggest them. Trained with the
205k vocabulary those ids are not in it: `read_records` drops them and counts them.
The 300,000 file's synthetic records are the first 209,548 of the 1,000,000 file's.

    python -m benchmarks.scale.scale_records --out runs/scale48 [--sizes 300000,1000000]
        [--formats jsonl,marc] [--lock /tmp/tagalign-cpu.lock]

Prints what each file holds (languages, types, subjects per record, generated gold), its
size on disk and how long it took to write.

``--train-sizes train,300000[,1000000]`` instead makes the cost table: for each size, `tagalign
train` of the default hybrid (``--param``s added) on that file's MARC copy (``train``:
the shared train JSONL, 90,452 records) with the 205k-heading GND vocabulary, in a fresh
process under ``/usr/bin/time -v`` (wall, CPU and peak RSS; a project already trained is
reused, its figures read from ``hybrid-N.train.json``); then, each in a fresh process, the
model's parts on disk, tagging all 19,949 dev records (load s, records/s, RSS, dev avg
R@5..20 against the vocabulary's gold) and `serve_latency.py --mmap` (single-record REST
latency, sequential, and the server's RSS). Each phase's seconds and RSS come from the
model's ``hybrid.json`` (its share of the training's wall time, RSS after it and the
peak RSS so far printed beside it: the phase that first shows the peak set it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from benchmarks._common import add_data_args, cpu_lock, model_parts
from benchmarks.scale.memory_1m import Recombination
from benchmarks.scale.scale_vocab import gold_headings
from tagalign.io import atomic_path, write_json_atomic
from tagalign.records import Record, read_records
from tagalign.records.convert import write_jsonl
from tagalign.records.marc.writer import MarcWriter, record_to_marc
from tagalign.vocab import load_vocabulary

SEED = 48
RUNS = Path(__file__).resolve().parents[2] / "runs" / "scale48"


class _Languages:
    """What `Recombination.draw` asks of a featurizer: a record's language key."""

    @staticmethod
    def lang_of(language: str | None) -> str:
        return language or "?"


class Workload:
    """The real records and the synthetic ones: record k of the sequence real + synthetic
    is `record(k)`; ``order(n)`` the seeded order of a file of n records."""

    def __init__(self, real: list[Record], largest: int, share: float, gold: int, pool: int,
                 seed: int = SEED):
        self.real = real
        n_syn = max(0, largest - len(real))
        self.recomb = Recombination.draw(real, _Languages(), len(real), n_syn, seed)
        rng = self.recomb.rng
        self.headings = gold_headings(gold, pool) if share > 0 else []
        carries = rng.random(n_syn) < share
        self.generated = np.where(carries, rng.integers(0, max(1, len(self.headings)), n_syn),
                                  -1)
        self.seed = seed

    def record(self, k: int) -> Record:
        if k < len(self.real):
            return self.real[k]
        i = k - len(self.real)
        a_i, b_i, c_i = self.recomb.abc[i]
        a, b, c = self.real[a_i], self.real[b_i], self.real[c_i]
        first, second = self.recomb.parts[1][b_i], self.recomb.parts[2][c_i]
        subjects = list(dict.fromkeys(a.subjects + b.subjects + c.subjects))
        title = a.title
        g = int(self.generated[i])
        if g >= 0:
            heading = self.headings[g]
            title = f"{title}: {heading.label}"
            subjects.append(heading.id)
        return Record(f"syn-{i:07d}", title, f"{first} {second}".strip(), a.language, a.type,
                      subjects, list(dict.fromkeys(a.domains + b.domains + c.domains)))

    def order(self, n: int) -> np.ndarray:
        return np.random.default_rng(self.seed + n).permutation(n)

    def records(self, n: int) -> Iterator[Record]:
        for k in self.order(n):
            yield self.record(int(k))

    def label_of(self, vocab) -> Callable[[str], str | None]:
        generated = {h.id: h.label for h in self.headings}

        def label(sid: str) -> str | None:
            if sid in generated:
                return generated[sid]
            return vocab.label(sid) if sid in vocab else None

        return label


def write_marc(path: Path, records: Iterator[Record], label) -> int:
    n = 0
    with atomic_path(path) as tmp, gzip.open(tmp, "wb", compresslevel=3) as fh:
        writer = MarcWriter(fh, "marc")
        for rec in records:
            writer.write(record_to_marc(rec, label))
            n += 1
        writer.close()
    return n


def describe(work: Workload, n: int) -> dict:
    """What the file of ``n`` records holds (counted without writing it)."""
    langs, types = Counter(), Counter()
    subjects = generated = 0
    for k in range(n):
        rec = work.record(k)
        langs[rec.language or "?"] += 1
        types[rec.type or "?"] += 1
        subjects += len(rec.subjects)
        generated += k >= len(work.real) and work.generated[k - len(work.real)] >= 0
    return {"records": n, "real": min(n, len(work.real)),
            "synthetic": max(0, n - len(work.real)), "languages": dict(langs),
            "types": dict(types.most_common(6)),
            "subjects_per_record": round(subjects / n, 2),
            "with_generated_gold": int(generated),
            "generated_headings_used": len({int(g) for g in work.generated[
                :max(0, n - len(work.real))] if g >= 0})}


def timed(cmd: list[str], log: Path) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v``, its output to ``log`` as it goes: its wall
    and CPU seconds and peak RSS."""
    with open(log, "w") as fh:
        res = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=fh, stderr=subprocess.STDOUT)
    err = log.read_text(errors="replace")
    if res.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{err[-3000:]}")

    def field(name: str) -> str:
        return re.search(rf"{re.escape(name)}: (.+)", err).group(1).strip()

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return {"wall_s": round(wall, 1),
            "cpu_s": round(float(field("User time (seconds)"))
                           + float(field("System time (seconds)")), 1),
            "peak_rss_gib": round(int(field("Maximum resident set size (kbytes)")) / 2**20, 2)}


def measure(project: Path, dev: Path) -> dict:
    """Child process: load the project as `tagalign suggest` does (the ranker compiled),
    tag every dev record (20 suggestions) with the command's default jobs (one forked
    process per core), and print load seconds, records/s, RSS and dev avg R@5..20."""
    import psutil

    from benchmarks._common import suggestions
    from tagalign.evaluate.metrics import group_metrics
    from tagalign.project import Project
    from tagalign.project.jobs import DEFAULT_JOBS
    from tagalign.runtime import Runtime

    t0 = time.perf_counter()
    proj = Project.load(project, runtime=Runtime(compile_ranker=True))
    load_s = time.perf_counter() - t0
    recs = list(read_records(dev, vocab=proj.vocab))
    suggestions(proj, recs[:50], limit=20)  # warm-up
    t0 = time.perf_counter()
    got = suggestions(proj, recs, limit=20, jobs=DEFAULT_JOBS)
    rate = len(recs) / (time.perf_counter() - t0)
    avg_r = group_metrics([set(r.subjects) for r in recs],
                          [[s.id for s in row] for row in got])["avg_recall"]
    return {"load_s": round(load_s, 1), "dev_records": len(recs), "rec_per_s": round(rate, 1),
            "suggest_path": f"jobs {DEFAULT_JOBS}, ranker compiled",
            "rss_mib": round(psutil.Process().memory_info().rss / 2**20),
            "dev_avg_r": round(avg_r, 4)}


def cost_row(args, size: str) -> dict:
    """Train (or reuse) and measure the hybrid on one size of the workload."""
    data = args.train if size == "train" else args.out / f"records-{size}.mrc.gz"
    project = args.out / f"hybrid-{size}"
    done = args.out / f"hybrid-{size}.train.json"
    if not done.exists():
        cmd = [sys.executable, "-m", "tagalign.cli.main", "train", str(project),
               "--vocab", str(args.vocab), "--train", str(data)]
        for p in args.param:
            cmd += ["--param", p]
        with cpu_lock(args.lock):
            write_json_atomic(done, {"data": str(data), **timed(
                cmd, args.out / f"hybrid-{size}.train.log")})
    row = {"size": size, "train": json.loads(done.read_text())}
    phases = json.loads((project / "model" / "hybrid.json").read_text()).get("timings", {})
    row["phases"] = phases
    row["model_mib"] = {k: round(v, 1) for k, v in model_parts(project / "model").items()}
    measured = args.out / f"hybrid-{size}.measured.json"
    if not measured.exists():
        with cpu_lock(args.lock):
            child = subprocess.run([sys.executable, "-m", __spec__.name, "--measure", str(project),
                                    "--dev", str(args.dev)], capture_output=True, text=True,
                                   check=True)
            m = json.loads(child.stdout.strip().splitlines()[-1])
            lat = subprocess.run([sys.executable, "-m", "benchmarks.serve.serve_latency",
                "--project", str(project), "--requests", "300",
                "--clients", "0", "--mmap"], capture_output=True, text=True, check=True)
            m["serve_latency"] = lat.stdout.strip().splitlines()
        write_json_atomic(measured, m)
    row["measured"] = json.loads(measured.read_text())
    return row


def print_costs(rows: list[dict]) -> None:
    print("| training records | train wall (CPU s) | peak RSS GiB | model MiB | "
          "serve --mmap | suggest rec/s (load s) | dev avg R |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        t, m = r["train"], r["measured"]
        serve = "; ".join(line for line in m["serve_latency"]
                          if line.startswith(("sequential", "after 300")))
        print(f"| {r['size']} | {t['wall_s'] / 60:.1f} min ({t['cpu_s']:.0f}) | "
              f"{t['peak_rss_gib']} | {sum(r['model_mib'].values()):,.0f} | {serve} | "
              f"{m['rec_per_s']} ({m['load_s']}; {m.get('suggest_path', 'one process')}) | "
              f"{m['dev_avg_r']} |")
    for r in rows:
        wall = r["train"]["wall_s"]
        print(f"{r['size']}: phases (s, share of wall, RSS GB after / peak so far): "
              + ", ".join(f"{k} {v['seconds']:.0f} ({v['seconds'] / wall:.0%}, {v['rss_gb']}"
                          f" / {v.get('peak_gb', '?')})" for k, v in r["phases"].items()))
        print(f"{r['size']}: model parts MiB: " + ", ".join(
            f"{k} {v:,.1f}" for k, v in r["model_mib"].items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_args(ap)
    ap.add_argument("--out", type=Path, default=RUNS)
    ap.add_argument("--sizes", default="300000,1000000")
    ap.add_argument("--formats", default="jsonl,marc")
    ap.add_argument("--generated-share", type=float, default=0.2)
    ap.add_argument("--generated-gold", type=int, default=20_000)
    ap.add_argument("--generated-pool", type=int, default=40_000)
    ap.add_argument("--lock", type=Path, help="hold this CPU lock per heavy step")
    ap.add_argument("--train-sizes", help="train,300000,1000000: train and measure each")
    ap.add_argument("--param", action="append", default=[], help="hybrid key=value")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.dev)))
        return
    if args.train_sizes:
        args.out.mkdir(parents=True, exist_ok=True)  # ``train`` alone needs no records file
        print_costs([cost_row(args, size) for size in args.train_sizes.split(",")])
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    formats = args.formats.split(",")
    with cpu_lock(args.lock):
        t0 = time.perf_counter()
        real = [r for r in read_records(args.train) if r.subjects]
        vocab = load_vocabulary(args.vocab)
        work = Workload(real, sizes[-1], args.generated_share, args.generated_gold,
                        args.generated_pool)
        label = work.label_of(vocab)
        print(f"workload: {len(real)} real train records with subjects, "
              f"{max(0, sizes[-1] - len(real))} synthetic drawn (seed {SEED}) in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        for n in sizes:
            facts = describe(work, n)
            for fmt in formats:
                t1 = time.perf_counter()
                if fmt == "jsonl":
                    path = args.out / f"records-{n}.jsonl.gz"
                    write_jsonl(path, work.records(n))
                elif fmt == "marc":
                    path = args.out / f"records-{n}.mrc.gz"
                    write_marc(path, work.records(n), label)
                else:
                    raise SystemExit(f"unknown format {fmt!r}: jsonl or marc")
                facts[fmt] = {"file": str(path), "MiB": round(path.stat().st_size / 2**20, 1),
                              "write_s": round(time.perf_counter() - t1, 1)}
                print(f"  {path.name}: {facts[fmt]['MiB']} MiB in {facts[fmt]['write_s']} s",
                      flush=True)
            write_json_atomic(args.out / f"records-{n}.json", facts)
            print(json.dumps(facts, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
