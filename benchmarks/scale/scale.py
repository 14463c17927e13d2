#!/usr/bin/env python
"""Issue 11 benchmark: batch tagging records/s on the local engine and on Ray Data.

Trains (or reuses) a hybrid project on a seeded sample of train, builds the input from all
of dev plus a seeded sample of train (never a file prefix: the files are sorted by language
and type) and tags it with `tagalign.batch.run_batch` on: the local engine, Ray with 1
worker (2 threads) and Ray with 2 workers (1 thread each). Prints Ray's start-up time
(``ray.init``) separately, records/s with and without it, per-worker peak RSS, and checks
that every engine wrote the same suggestions for the same record ids.

    python -m benchmarks.scale.scale [--limit-train N] [--records N] [--engines local,ray1,ray2]
                               [--project DIR] [--param key=value ...] [--shard-size N]

The issue's setting: the hybrid trained on the full train set, 50,000 records, this 2-core
machine. Budget knobs: ``--limit-train`` (training sample), ``--records``, ``--param``
(hybrid parameters, e.g. ``sources=["omikuji","tfidf_knn","lexical"]``).

How cost grows: ``--growth 10000,30000,full`` trains the hybrid on each seeded sample size
(``full``: all of train.jsonl.gz, 90,452 records)
and prints training time, model size on disk (per part of the model), the RSS of a fresh
process that loads the project and tags 200 records, and suggest records/s on a seeded dev
sample; then fits ``cost = a·n^b`` to each and extrapolates to 1M and 10M training records.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks._common import add_data_args, model_parts, peak_rss_gb, suggestions
from tagalign.batch import get_engine, run_batch
from tagalign.cli.common import parse_params
from tagalign.project import Project
from tagalign.records import Record, read_records
from tagalign.vocab import load_vocabulary

RUNS = Path(__file__).resolve().parents[2] / "runs" / "scale"
ANCHOR = ("issue 11 anchor: Ray with 2 workers not slower than the local engine by more "
          "than its start-up cost (hybrid on full train, 50,000 records, 2 cores)")


def make_up(records: list[Record]) -> str:
    counts = Counter((r.language or "?", r.type or "?") for r in records)
    langs = Counter(r.language or "?" for r in records)
    top = ", ".join(f"{lg}/{ty} {n}" for (lg, ty), n in counts.most_common(6))
    return f"{len(records)} records ({dict(langs)}); largest groups: {top}"


def sample(path: Path, n: int | None, seed: int) -> list[Record]:
    recs = list(read_records(path))
    if n is not None and n < len(recs):
        recs = random.Random(seed).sample(recs, n)
    return recs


def build_project(args, train: list[Record]) -> Project:
    path = args.project or RUNS / f"hybrid-{len(train)}"
    if (path / "model").exists():
        print(f"project: reusing {path}")
        return Project.load(path)
    params = parse_params(args.param, None)
    vocab = load_vocabulary(args.vocab)
    project = Project.create(path, vocab, "hybrid", params)
    t0 = time.perf_counter()
    project.train(train)
    print(f"project: hybrid {params or '(defaults)'} trained on {len(train)} records in "
          f"{time.perf_counter() - t0:.0f} s → {path}")
    return project


def build_input(args, train: list[Record]) -> tuple[Path, list[Record]]:
    dev = list(read_records(args.dev))
    rnd = random.Random(args.seed + 1)
    if args.records <= len(dev):
        recs = rnd.sample(dev, args.records)
    else:
        pool = [r for r in read_records(args.train)]
        recs = dev + rnd.sample(pool, args.records - len(dev))
    path = RUNS / f"input-{args.records}-seed{args.seed}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in recs:
                fh.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    return path, recs


def read_output(out: Path) -> dict[str, list[str]]:
    rows = {}
    for part in sorted(out.glob("part-*.jsonl")):
        for line in part.read_text("utf-8").splitlines():
            obj = json.loads(line)
            rows[obj["id"]] = [(s["id"], s["score"]) for s in obj["subjects"]]
    return rows


def measure_project(path: Path, dev: Path, n_dev: int, seed: int) -> None:
    """Child process: load a project, tag a seeded dev sample; print RSS and records/s."""
    import psutil

    t0 = time.perf_counter()
    project = Project.load(path)
    load_s = time.perf_counter() - t0
    recs = sample(dev, n_dev, seed)
    suggestions(project, recs[:50], limit=20)  # warm-up
    t0 = time.perf_counter()
    suggestions(project, recs, limit=20)
    rate = len(recs) / (time.perf_counter() - t0)
    print(json.dumps({"load_s": round(load_s, 1), "rec_per_s": round(rate, 1),
                      "serve_rss_mb": round(psutil.Process().memory_info().rss / 2**20)}))


def fit_power(ns: list[int], ys: list[float]) -> tuple[float, float]:
    """Least squares of log y = log a + b·log n (needs two sizes or more)."""
    xs = [math.log(n) for n in ns]
    ls = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(xs) / len(xs), sum(ls) / len(ls)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ls, strict=True)) / max(
        sum((x - mx) ** 2 for x in xs), 1e-12)
    return math.exp(my - b * mx), b


def growth(args) -> None:
    # "full" (or a size ≥ the file) is all of train, not a sample: the largest point
    sizes = [None if x.strip() == "full" else int(x) for x in args.growth.split(",")]
    rows = []
    for size in sizes:
        train = sample(args.train, size, args.seed)
        n = len(train)
        what = "all of train" if size is None else f"seeded sample, seed {args.seed}"
        print(f"training records {n} ({what}): {make_up(train)}", flush=True)
        path = RUNS / f"growth-{n}"
        timing = RUNS / f"growth-{n}.train_s.json"  # kept beside a project reused later
        t0 = time.perf_counter()
        args.project = path
        project = build_project(args, train)
        if not timing.exists():
            timing.write_text(json.dumps(time.perf_counter() - t0))
        train_s = json.loads(timing.read_text())
        del train
        parts = model_parts(project.path / "model")
        measured = RUNS / f"growth-{n}.measured.json"  # serve figures, kept like train_s
        if args.remeasure or not measured.exists():
            child = subprocess.run([sys.executable, "-m", __spec__.name, "--measure-project",
                                    str(path),
                                    "--dev", str(args.dev), "--records", str(args.growth_dev),
                                    "--seed", str(args.seed)], capture_output=True, text=True,
                                   check=True)
            m = json.loads(child.stdout.strip().splitlines()[-1])
            m["load_avg_1m"] = round(os.getloadavg()[0], 2)
            measured.write_text(json.dumps(m))
        m = json.loads(measured.read_text())
        phases = json.loads((path / "model" / "hybrid.json").read_text()).get("timings", {})
        row = {"train_records": n, "train_s": round(train_s, 1),
               "train_peak_rss_gb": max((v["rss_gb"] for v in phases.values()), default=0),
               "phase_s": {k: v["seconds"] for k, v in phases.items()},
               "disk_mb": round(sum(parts.values()), 2),
               "parts_mb": {k: round(v, 3) for k, v in sorted(parts.items())}, **m}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("| train records | train s (peak RSS GB) | disk MiB | serve RSS MiB | suggest rec/s "
          "| load avg while measured |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['train_records']} | {r['train_s']} ({r['train_peak_rss_gb']}) | "
              f"{r['disk_mb']} | {r['serve_rss_mb']} | {r['rec_per_s']} | "
              f"{r.get('load_avg_1m', '?')} |")
    if len(rows) < 2:
        return
    ns = [r["train_records"] for r in rows]

    def report(name: str, vals: list[float]) -> None:
        """Power law over all sizes and over the two largest (the local exponent), and an
        affine fit c + m·n (constant parts such as the encoder and the label index do not
        grow, so a pure power law understates what grows linearly)."""
        a, b = fit_power(ns, vals)
        a2, b2 = fit_power(ns[-2:], vals[-2:])
        m, c = np.polyfit(ns, vals, 1)
        print(f"  {name}: power b = {b:.2f} (1M → {a * 1e6 ** b:,.1f}; 10M → "
              f"{a * 1e7 ** b:,.1f}); two largest b = {b2:.2f} (1M → {a2 * 1e6 ** b2:,.1f}; "
              f"10M → {a2 * 1e7 ** b2:,.1f}); affine {c:,.1f} + {m * 1e3:,.4f}/1k records "
              f"(1M → {c + m * 1e6:,.1f}; 10M → {c + m * 1e7:,.1f})")

    print("fits over this range only, extrapolated to 1M / 10M training records (one machine):")
    for key in ("train_s", "train_peak_rss_gb", "disk_mb", "serve_rss_mb"):
        report(key, [r[key] for r in rows])
    report("ms per suggested record", [1000 / r["rec_per_s"] for r in rows])
    for phase in rows[-1]["phase_s"]:
        report(f"training phase {phase!r} s", [r["phase_s"].get(phase, 0) or 1e-3 for r in rows])
    for part in rows[-1]["parts_mb"]:
        report(f"model part {part!r} MiB", [r["parts_mb"].get(part, 0) or 1e-3 for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--limit-train", type=int, help="seeded sample of train (default: all)")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--engines", default="local,ray1,ray2")
    ap.add_argument("--project", type=Path)
    ap.add_argument("--param", action="append", help="hybrid parameter key=value")
    ap.add_argument("--shard-size", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--object-store-mb", type=int, default=256)
    ap.add_argument("--growth", help="training sizes, e.g. 10000,30000,full (full = all train)")
    ap.add_argument("--growth-dev", type=int, default=2000, help="dev records for rec/s")
    ap.add_argument("--remeasure", action="store_true",
                    help="--growth: measure serve RSS and rec/s again, not the kept figures")
    ap.add_argument("--measure-project", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure_project:
        return measure_project(args.measure_project, args.dev, args.records, args.seed)
    if args.growth:
        return growth(args)

    train = sample(args.train, args.limit_train, args.seed)
    print(f"training sample (seed {args.seed}): {make_up(train)}")
    project = build_project(args, train)
    size_mb = sum(p.stat().st_size for p in (project.path / "model").rglob("*")
                  if p.is_file()) / 2**20
    print(f"model on disk: {size_mb:.0f} MiB")
    src, recs = build_input(args, train)
    print(f"input {src.name}: {make_up(recs)}")
    del train, recs

    cpus = os.cpu_count() or 1
    print(f"machine: {cpus} CPUs, load average {os.getloadavg()} before the runs "
          "(other engineers' work may be running)")
    results = {}
    outputs = {}
    ray_init_s = None
    for name in args.engines.split(","):
        out = RUNS / f"out-{name}"
        shutil.rmtree(out, ignore_errors=True)
        if name == "local":
            engine = get_engine("local")
        else:
            workers = int(name.removeprefix("ray"))
            engine = get_engine("ray", num_workers=workers, object_store_mb=args.object_store_mb,
                                threads_per_worker=max(1, cpus // workers))
            if ray_init_s is None:  # Ray starts once; its start-up is reported on its own
                ray_init_s = engine.start()
        spec = {"task": "suggest", "project": str(project.path.resolve()), "limit": 20}
        t0 = time.perf_counter()
        first: list[float] = []  # when the first shard came back, minus its own work

        def on_shard(summary, t0=t0, first=first):
            if not first:
                first.append(time.perf_counter() - t0 - summary["seconds"])

        res = run_batch(spec, src, out, engine, shard_size=args.shard_size, on_shard=on_shard)
        wall = time.perf_counter() - t0
        rss: dict[int, float] = {}
        load: dict[int, float] = {}
        for e in res.manifest["shards"].values():
            w = e["worker"]
            rss[w["pid"]] = max(rss.get(w["pid"], 0.0), w["rss_mb"])
            load[w["pid"]] = w["load_s"]
        shard_s = sorted(e["seconds"] for e in res.manifest["shards"].values())
        results[name] = {"records": res.records_in, "written": res.records_out,
                         "errors": res.errors, "wall_s": round(wall, 1),
                         "rec_per_s": round(res.records_in / wall, 1),
                         "workers": engine.workers,
                         "project_load_s": round(max(load.values()), 1),
                         "worker_start_s": round(first[0], 1),
                         "rec_per_s_after_start": round(
                             res.records_in / max(wall - first[0], 1e-9), 1),
                         "worker_rss_mb": sorted(rss.values()),
                         "median_shard_s": shard_s[len(shard_s) // 2]}
        outputs[name] = read_output(out)
        print(f"{name}: {json.dumps(results[name])}", flush=True)

    print()
    print(f"Ray start-up (ray.init, {args.object_store_mb} MiB object store): "
          f"{ray_init_s:.1f} s" if ray_init_s is not None else "Ray not run")
    print(f"driver peak RSS {peak_rss_gb():.2f} GB (the local engine runs in the driver)")
    print("| engine | workers | records | wall s | rec/s | worker start s (of which project "
          "load) | rec/s after start | per-worker RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['workers']} | {r['records']} | {r['wall_s']} | {r['rec_per_s']} "
              f"| {r['worker_start_s']} ({r['project_load_s']}) | {r['rec_per_s_after_start']} "
              f"| {', '.join(f'{x:.0f}' for x in r['worker_rss_mb'])} |")
    names = list(outputs)
    same = all(outputs[n] == outputs[names[0]] for n in names[1:])
    print(f"every engine wrote the same suggestions for the same ids: {same}")
    if "local" in results and "ray2" in results:
        gap = results["ray2"]["wall_s"] - results["local"]["wall_s"]
        startup = ray_init_s + results["ray2"]["worker_start_s"] - results["local"][
            "worker_start_s"]
        print(f"ray2 − local wall time: {gap:+.1f} s; Ray's start-up cost (ray.init + starting "
              f"the workers and loading the project in them, minus the local load) "
              f"{startup:.1f} s → "
              f"{'within' if gap <= startup else 'NOT within'} the start-up cost")
    print(ANCHOR)


if __name__ == "__main__":
    main()
