"""`tagalign suggest --output` killed and resumed, locally (``suggest``) and on Ray
(``batch``): the output equals an uninterrupted run line for line."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from benchmarks.faults.common import attempts, by_id, killed_run, read_lines, report, run, timed


def scenario_suggest(ctx, rng: random.Random) -> None:
    ref = ctx.work / "suggest-ref.jsonl"
    args = ["suggest", str(ctx.project), "-i", str(ctx.dev_file), "--batch-size", "100"]
    length = timed(lambda: run(*args, "-o", str(ref)))
    want, _ = by_id(read_lines(ref))
    kills = survived = lost = doubled = 0
    for i in attempts(ctx, lambda: kills):  # noqa: B023 - reads the current count
        out = ctx.work / f"suggest-{i}.jsonl"
        killed, _ = killed_run([*args, "-o", str(out)], rng.uniform(0.5, 0.8 * length))
        kills += killed
        run(*args, "-o", str(out), "--resume")
        got, twice = by_id(read_lines(out))
        lost += len(set(want) - set(got))
        doubled += twice
        survived += got == want
        out.unlink()
    report("suggest", kills, survived, lost, doubled=doubled, runs=ctx.runs,
           uninterrupted_s=round(length, 1))


def scenario_batch(ctx, rng: random.Random) -> None:
    args = ["suggest", str(ctx.project), "-i", str(ctx.dev_file), "--engine", "ray",
            "--num-workers", "1", "--shard-size", "100"]
    ref = ctx.work / "batch-ref"
    length = timed(lambda: run(*args, "-o", str(ref)))

    def rows(folder: Path) -> tuple[dict[str, dict], int]:
        return by_id([r for p in sorted(folder.glob("part-*.jsonl*")) for r in read_lines(p)])

    want, _ = rows(ref)
    kills = survived = lost = doubled = 0
    for i in attempts(ctx, lambda: kills):  # noqa: B023 - reads the current count
        out = ctx.work / f"batch-{i}"
        killed, _ = killed_run([*args, "-o", str(out)], rng.uniform(1.0, 0.8 * length))
        kills += killed
        run(*args, "-o", str(out))
        got, twice = rows(out)
        lost += len(set(want) - set(got))
        doubled += twice
        survived += got == want
        shutil.rmtree(out)
    report("batch", kills, survived, lost, doubled=doubled, runs=ctx.runs,
           uninterrupted_s=round(length, 1))
