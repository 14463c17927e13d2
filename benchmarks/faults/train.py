"""`tagalign train` killed at seeded moments and resumed (``train``): the resumed
trainings score as the uninterrupted ones."""

from __future__ import annotations

import random
import shutil
import statistics
import time
from pathlib import Path

from benchmarks._common import suggestions
from benchmarks.faults.common import SMALL, killed_run, report, run, timed


def _phases_done(folder: Path) -> list[str]:
    """The training phases finished in ``folder/work`` (oldest first)."""
    done = sorted((folder / "work").glob("*/phase.json"), key=lambda p: p.stat().st_mtime)
    return [p.parent.name for p in done]


def _spread(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return (f"n {len(xs)}, mean {statistics.fmean(xs):.4f}, sd {sd:.4f}, "
            f"range {min(xs):.4f}-{max(xs):.4f}")


def summary(refs: list[float], scores: list[float], by_phase: dict[str, list[float]]
            ) -> bool:
    """Print both spreads, the resumed ones by the phase finished before the kill, and
    whether the means differ (Welch's t, Mann-Whitney U) or the spreads (Brown-Forsythe);
    True when a mean test says they differ at 5 %."""
    from scipy import stats

    welch = stats.ttest_ind(scores, refs, equal_var=False)
    mwu = stats.mannwhitneyu(scores, refs, alternative="two-sided")
    spread = stats.levene(scores, refs, center="median")  # Brown-Forsythe
    differs = bool(welch.pvalue < 0.05 or mwu.pvalue < 0.05)
    print(f"  uninterrupted: {_spread(refs)}", flush=True)
    print(f"  resumed:       {_spread(scores)}", flush=True)
    for phase, xs in by_phase.items():
        print(f"    killed after {phase:22s} {_spread(xs)}", flush=True)
    print(f"  Welch t {welch.statistic:.2f} p {welch.pvalue:.3f}; Mann-Whitney U "
          f"{mwu.statistic:.0f} p {mwu.pvalue:.3f}: "
          f"{'the resumed mean differs' if differs else 'no difference at 5 %'}; spreads "
          f"(Brown-Forsythe) p {spread.pvalue:.3f}", flush=True)
    return differs


def scenario_train(ctx, rng: random.Random) -> None:
    """``ctx.train_refs`` uninterrupted trainings and ``ctx.train_resumes`` killed-then-resumed
    ones on the same records, taken in turn (a reference, then a killed run, …: whatever
    load the machine has falls on both alike); whether the resumed mean differs (Welch's
    t, Mann-Whitney U); the resumed scores by the last phase finished before the kill. A
    kill comes at a seeded moment within 80 % of the references' median length so far.
    Every tenth kill also resumes with *other* records (an extra run): no finished phase
    may be reused then."""
    from tagalign.evaluate import evaluate
    from tagalign.project import Project

    def avg_recall(folder: Path) -> float:
        proj = Project.load(folder)
        preds = {r.id: [s.id for s in row] for r, row in
                 zip(ctx.dev[:200], suggestions(proj, ctx.dev[:200], limit=20), strict=True)}
        o = evaluate(ctx.dev[:200], preds)["overall"]
        return o["avg_recall"]

    params = [a for k, v in SMALL.items() for a in ("--param", f"{k}={v}")]

    def args(folder: Path, train: Path) -> list[str]:
        return ["train", str(folder), "--vocab", str(ctx.vocab_file), "--train", str(train),
                *params]

    refs: list[float] = []
    lengths: list[float] = []

    def reference() -> None:
        folder = ctx.work / f"train-ref-{len(refs)}"
        shutil.rmtree(folder, ignore_errors=True)
        lengths.append(timed(lambda: run(*args(folder, ctx.train_file))))
        refs.append(avg_recall(folder))
        print(f"  train reference {len(refs) - 1}: avg R@5..20 {refs[-1]:.4f} "
              f"({lengths[-1]:.0f} s)", flush=True)
        shutil.rmtree(folder, ignore_errors=True)

    kills = reused_other = others = 0
    scores: list[float] = []
    by_phase: dict[str, list[float]] = {}
    for i in range(3 * (ctx.train_resumes + ctx.train_resumes // 10) + ctx.train_refs):
        if len(refs) < ctx.train_refs and (len(refs) <= len(scores)
                                           or len(scores) >= ctx.train_resumes):
            reference()
            continue
        if len(scores) >= ctx.train_resumes:
            break
        length = sorted(lengths)[len(lengths) // 2]
        folder = ctx.work / f"train-{i}"
        shutil.rmtree(folder, ignore_errors=True)
        t0 = time.perf_counter()
        killed, _ = killed_run(args(folder, ctx.train_file), rng.uniform(2.0, 0.8 * length))
        kills += killed
        if not killed:  # it ended first: one more uninterrupted training
            lengths.append(time.perf_counter() - t0)
            refs.append(avg_recall(folder))
            print(f"  train reference {len(refs) - 1} (ended before its kill): "
                  f"avg R@5..20 {refs[-1]:.4f}", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
            continue
        done = _phases_done(folder)
        last = done[-1] if done else "(none)"
        if kills % 10 == 0:  # the other records: nothing finished may be reused
            res = run(*args(folder, ctx.other_train_file))
            others += 1
            reused_other += "finished earlier" in res.stderr + res.stdout
            shutil.rmtree(folder, ignore_errors=True)
            continue
        run(*args(folder, ctx.train_file))
        scores.append(avg_recall(folder))
        by_phase.setdefault(last, []).append(scores[-1])
        print(f"  train resume {len(scores) - 1} (killed after {last}): "
              f"avg R@5..20 {scores[-1]:.4f}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    differs = summary(refs, scores, by_phase)
    report("train", kills, len(scores) + others - reused_other, 0,
           resumed_mean_differs=differs, other_inputs=others,
           other_inputs_reused=reused_other,
           uninterrupted_s=round(sorted(lengths)[len(lengths) // 2], 1))
