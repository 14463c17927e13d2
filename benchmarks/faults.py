"""Faults survived (issue 30): kill -9 at seeded random moments, then restart or resume.

    python benchmarks/faults.py --work runs/faults [--kills 20] [--only suggest,server]

Scenarios (each killed ``--kills`` times, at a moment drawn with ``--seed`` between the
start and the length of an uninterrupted run):

- ``train``: a small hybrid on 1,500 seeded training records: ``--train-refs`` (5)
  uninterrupted trainings and ``--train-resumes`` (20) killed ones resumed with `tagalign
  train` on the same records (a run that ends before its kill is one more reference),
  each scored by avg R@5..20 on 200 seeded dev records. Both spreads (n, mean, sd,
  range), Welch's t-test and a Mann-Whitney U of whether the resumed mean differs, a
  Brown-Forsythe test of the spreads (Omikuji's trees are unseeded: no run is
  bit-identical), and the resumed scores by the last phase finished before the kill.
  Every tenth kill resumes with *other* records instead (an extra run): no finished phase
  may then be reused ("finished earlier").
- ``suggest``: `tagalign suggest --output` on 1,500 seeded dev records, killed, then
  `--resume`: the output must equal an uninterrupted run line for line (ids, subjects,
  scores), no record lost or doubled.
- ``batch``: the same on Ray (`--engine ray`, a folder of shards), rerun to resume.
- ``server``: `tagalign serve --allow-learn` under a learn + suggest load, killed, then
  restarted: every learn request acknowledged (HTTP 200) before the kill is in the feedback
  store (`tagalign feedback export`).
- ``download``: `tagalign download --force` of an update into a project with feedback,
  killed: afterwards the folder holds the old project with its feedback or the new one
  with the same feedback, never neither (then a rerun completes it).
- ``soak``: ``--soak-minutes`` (5) of a mixed load from 16 clients on ``--soak-project``
  served with 2 workers (`benchmarks/soak.py` says what the load holds): failed requests,
  each worker's RSS growth over the last 40 % of the run, p95 of the last tenth against the
  first.

Prints per scenario: kills, survivals, records lost (must be 0), and the figures above.
The sample: seeded draws of the shared LLMs4Subjects train/dev (both languages, all types).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import DATA, free_port, seeded_records, suggestions

CLI = [sys.executable, "-m", "tagalign.cli.main"]
SMALL = {"embed_vocab_size": 8000, "embed_dim": 64, "embed_batch_size": 128,
         "ranker_rounds": 150, "omikuji_cluster_k": 20, "max_ranker_records": 600}


def run(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([*CLI, *args], capture_output=True, text=True, **kw)
    if check and res.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


def killed_run(args: list[str], after: float) -> tuple[bool, str]:
    """Start ``args``, kill -9 after ``after`` s; (whether it was killed before it ended,
    its stderr)."""
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        proc.wait(after)
        return False, proc.stderr.read()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True, proc.stderr.read()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def write_jsonl(path: Path, records) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
    return path


def read_lines(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def by_id(rows: list[dict]) -> tuple[dict[str, dict], int]:
    """Rows by record id, and how many ids came more than once."""
    out: dict[str, dict] = {}
    doubled = 0
    for row in rows:
        doubled += row["id"] in out
        out[row["id"]] = row
    return out, doubled


def attempts(ctx, kills_so_far):
    """Run indices until ``ctx.kills`` runs were really killed (a run may end before its
    moment comes), at most three times as many runs."""
    ctx.runs = 0
    for i in range(3 * ctx.kills):
        if kills_so_far() >= ctx.kills:
            return
        ctx.runs = i + 1
        yield i


def report(name: str, kills: int, survived: int, lost: int, **figures) -> None:
    extra = "".join(f", {k} {v}" for k, v in figures.items())
    print(f"{name:9s} kills {kills:3d}, survived {survived:3d}, records lost {lost}{extra}",
          flush=True)


# -- scenarios ------------------------------------------------------------------------------
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


def _feedback_ids(project: Path, out: Path) -> set[str]:
    run("feedback", "export", str(project), "--out", str(out))
    return {r["id"] for r in read_lines(out)}


def _load(kind: str, url: str, pid: str, dev: list, acked: list[str],
          stop: threading.Event, n: int) -> None:
    """Learn (one new record a request, its id kept once acknowledged) or suggest requests
    until ``stop``."""
    import httpx

    k = 0
    with httpx.Client(timeout=10) as client:
        while not stop.is_set():
            rec = dev[k % len(dev)]
            try:
                if kind == "learn":
                    rid = f"fault-{n}-{k}"
                    res = client.post(f"{url}/projects/{pid}/learn", json={"records": [{
                        "id": rid, "title": rec.title, "abstract": rec.abstract,
                        "language": rec.language, "subjects": rec.subjects[:3]}]})
                    if res.status_code == 200:
                        acked.append(rid)
                else:
                    client.post(f"{url}/projects/{pid}/suggest",
                                json={"title": rec.title, "abstract": rec.abstract,
                                      "limit": 10})
            except httpx.HTTPError:
                time.sleep(0.2)
            k += 1


def scenario_server(ctx, rng: random.Random) -> None:
    import httpx

    project = ctx.work / "served"
    kills = survived = lost = 0
    acked_total = 0
    for i in range(ctx.kills):
        shutil.rmtree(project, ignore_errors=True)
        shutil.copytree(ctx.project, project)
        port = free_port()
        url = f"http://127.0.0.1:{port}/tagalign/v1"
        server = subprocess.Popen([*CLI, "serve", str(project), "--port", str(port),
                                   "--allow-learn"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        acked: list[str] = []
        stop = threading.Event()

        t0 = time.time()
        while True:  # up
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
            if time.time() - t0 > 300:
                raise SystemExit("server did not start")
        threads = [threading.Thread(target=_load, args=(k, url, project.name, ctx.dev, acked,
                                                        stop, i))
                   for k in ("learn", "suggest")]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.5, 5.0))
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        kills += 1
        seen = list(acked)  # every acknowledgement received before the kill
        stop.set()
        for t in threads:
            t.join()
        stored = _feedback_ids(project, ctx.work / "feedback.jsonl")
        missing = [rid for rid in seen if rid not in stored]
        lost += len(missing)
        survived += not missing
        acked_total += len(seen)
    report("server", kills, survived, lost, learn_acknowledged=acked_total)


def _rows_of(db: Path) -> int:
    with sqlite3.connect(db) as con:
        tables = [t for (t,) in con.execute("select name from sqlite_master where type='table'")]
        return sum(con.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables)


def scenario_download(ctx, rng: random.Random) -> None:
    store = ctx.work / "store"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir()
    archive = run("upload", str(ctx.project), f"file://{store}/update.tar.gz").stdout
    url = f"file://{store}/update.tar.gz"
    served = ctx.work / "served-dl"
    kills = survived = lost = 0
    length = None
    for i in attempts(ctx, lambda: kills):  # noqa: B023 - reads the current count
        shutil.rmtree(served, ignore_errors=True)
        shutil.copytree(ctx.project, served)
        db = served / "feedback.sqlite"
        with sqlite3.connect(db) as con:  # the librarians' decisions so far
            con.execute("create table if not exists decisions (id text, subject text)")
            con.executemany("insert into decisions values (?, ?)",
                            [(f"rec-{i}-{k}", "4015065-3") for k in range(50)])
        rows = _rows_of(db)
        args = ["download", url, "--into", str(served), "--force"]
        if length is None:
            probe = ctx.work / "probe-dl"
            shutil.rmtree(probe, ignore_errors=True)
            length = timed(lambda p=probe: run("download", url, "--into", str(p)))
        killed, _ = killed_run(args, rng.uniform(0.2, 0.8 * length))
        kills += killed
        ok = (served / "project.json").exists() and (served / "model").exists() and \
            db.exists() and _rows_of(db) == rows
        survived += ok
        lost += 0 if db.exists() and _rows_of(db) == rows else rows
        run(*args)  # a rerun completes the update, keeping the feedback
        if not db.exists() or _rows_of(db) != rows:
            lost += rows
    report("download", kills, survived, lost, archive=archive.strip()[-40:],
           uninterrupted_s=round(length or 0, 1))


def _phases_done(folder: Path) -> list[str]:
    """The training phases finished in ``folder/work`` (oldest first)."""
    done = sorted((folder / "work").glob("*/phase.json"), key=lambda p: p.stat().st_mtime)
    return [p.parent.name for p in done]


def _spread(xs: list[float]) -> str:
    import statistics

    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return (f"n {len(xs)}, mean {statistics.fmean(xs):.4f}, sd {sd:.4f}, "
            f"range {min(xs):.4f}-{max(xs):.4f}")


def scenario_train(ctx, rng: random.Random) -> None:
    """``ctx.train_refs`` uninterrupted trainings and ``ctx.train_resumes`` killed-then-resumed
    ones on the same records; whether the resumed mean differs (Welch's t, Mann-Whitney U);
    the resumed scores by the last phase finished before the kill. Every tenth kill also
    resumes with *other* records (an extra run): no finished phase may be reused then."""
    from scipy import stats

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
    lengths = []
    for j in range(ctx.train_refs):
        folder = ctx.work / f"train-ref-{j}"
        shutil.rmtree(folder, ignore_errors=True)
        lengths.append(timed(lambda f=folder: run(*args(f, ctx.train_file))))
        refs.append(avg_recall(folder))
        print(f"  train reference {j}: avg R@5..20 {refs[-1]:.4f} ({lengths[-1]:.0f} s)",
              flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    length = sorted(lengths)[len(lengths) // 2]
    kills = reused_other = others = 0
    scores: list[float] = []
    by_phase: dict[str, list[float]] = {}
    for i in range(3 * (ctx.train_resumes + ctx.train_resumes // 10)):
        if len(scores) >= ctx.train_resumes:
            break
        folder = ctx.work / f"train-{i}"
        shutil.rmtree(folder, ignore_errors=True)
        t0 = time.perf_counter()
        killed, _ = killed_run(args(folder, ctx.train_file), rng.uniform(2.0, 0.8 * length))
        kills += killed
        if not killed:  # it ended first: one more uninterrupted training (the machine got
            # faster than when the references ran: later kills come sooner)
            length = min(length, time.perf_counter() - t0)
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
    welch = stats.ttest_ind(scores, refs, equal_var=False)
    mwu = stats.mannwhitneyu(scores, refs, alternative="two-sided")
    spread = stats.levene(scores, refs, center="median")  # Brown-Forsythe
    differs = welch.pvalue < 0.05 or mwu.pvalue < 0.05
    print(f"  uninterrupted: {_spread(refs)}", flush=True)
    print(f"  resumed:       {_spread(scores)}", flush=True)
    for phase, xs in by_phase.items():
        print(f"    killed after {phase:22s} {_spread(xs)}", flush=True)
    print(f"  Welch t {welch.statistic:.2f} p {welch.pvalue:.3f}; Mann-Whitney U "
          f"{mwu.statistic:.0f} p {mwu.pvalue:.3f}: "
          f"{'the resumed mean differs' if differs else 'no difference at 5 %'}; spreads "
          f"(Brown-Forsythe) p {spread.pvalue:.3f}", flush=True)
    report("train", kills, len(scores) + others - reused_other, 0,
           resumed_mean_differs=differs, other_inputs=others,
           other_inputs_reused=reused_other, uninterrupted_s=round(length, 1))


def scenario_soak(ctx, rng: random.Random) -> None:
    """`benchmarks/soak.py` for ``--soak-minutes`` on ``--soak-project`` (2 workers, 16
    clients), single and batch suggests and the queue from the dev sample."""
    from _common import seeded_sample
    from soak import run_soak, summary

    if not (ctx.soak_project / "model").exists():
        print(f"soak: no trained project at {ctx.soak_project}: skipped (--soak-project)")
        return
    records = [r for r in ctx.dev if r.title.strip()]
    queue = seeded_sample(records, 200, rng.randrange(1 << 30))
    queue_file = write_jsonl(ctx.work / "soak-queue.jsonl", queue)
    soak, db = run_soak(ctx.soak_project, ctx.work, records, queue_file, len(queue),
                        ctx.soak_minutes)
    out = ctx.work / "soak-feedback.jsonl"
    run("feedback", "export", str(db), "--out", str(out))
    stored = {r["id"] for r in read_lines(out)}
    lost = len(soak.acked - stored)
    s = summary(soak)
    print(f"  soak of {ctx.soak_project} ({s['minutes']} min, 16 clients, 2 workers, "
          f"load {os.getloadavg()[0]:.1f} at the end): {s['requests']} requests "
          f"{s['by_kind']}, {s['failed']} failed {s['failed_by_kind']} (target 0)", flush=True)
    for err in s["failed_examples"]:
        print(f"    failed: {err}")
    for what, (start, mid, end, growth) in s["rss"].items():
        print(f"  {what} RSS: {start} MiB at the start, {mid} at 60 %, {end} at the end: "
              f"{growth:+.1f} % over the last 40 % (target ≤ 5 %)")
    print("  each process (seconds: RSS MiB first and last seen): " + "; ".join(
        f"{pid} {a:.0f} s: {ra:.0f} -> {b:.0f} s: {rb:.0f}"
        for pid, (a, ra, b, rb) in s["processes"].items()))
    (f_s, l_s), (f_a, l_a) = s["p95_suggest_ms"], s["p95_all_ms"]
    print(f"  p95 first / last tenth: single suggest {f_s} / {l_s} ms, all requests "
          f"{f_a} / {l_a} ms (target: last within 20 % of first)", flush=True)
    print(f"  reloads {s['reloads']} ({s['reloads_failed']} failed {s['reload_errors']}), "
          f"seconds {s['reload_s']}; warm-up (not counted): {s['warm_up'][0]} requests, "
          f"{s['warm_up'][1]} failed; learn ids acknowledged {len(soak.acked)}, not in the store "
          f"{lost}", flush=True)
    report("soak", s["reloads"], s["reloads"] - s["reloads_failed"], lost,
           requests=s["requests"], failed=s["failed"],
           workers_rss_growth_pct=s["rss"]["workers' max"][3],
           p95_suggest_ms=f"{f_s}->{l_s}")


SCENARIOS = {"train": scenario_train, "suggest": scenario_suggest, "batch": scenario_batch,
             "server": scenario_server, "download": scenario_download, "soak": scenario_soak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("runs/faults"))
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-refs", type=int, default=5,
                    help="train: uninterrupted reference trainings")
    ap.add_argument("--train-resumes", type=int, default=20,
                    help="train: killed-then-resumed trainings on the same records")
    ap.add_argument("--soak-minutes", type=float, default=5.0)
    ap.add_argument("--soak-project", type=Path, default=Path("runs/bc20k"),
                    help="soak: the trained project to serve (never written)")
    ap.add_argument("--only", default=",".join(SCENARIOS))
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    args = ap.parse_args()
    from tagalign.vocab import load_vocabulary

    ctx = argparse.Namespace(work=args.work.resolve(), kills=args.kills, vocab_file=args.vocab)
    ctx.train_refs, ctx.train_resumes = args.train_refs, args.train_resumes
    ctx.soak_minutes, ctx.soak_project = args.soak_minutes, args.soak_project.resolve()
    ctx.work.mkdir(parents=True, exist_ok=True)
    vocab = load_vocabulary(args.vocab)
    train = seeded_records(args.train, vocab, 3000, args.seed)
    ctx.train_file = write_jsonl(ctx.work / "train.jsonl", train[:1500])
    ctx.other_train_file = write_jsonl(ctx.work / "train-other.jsonl", train[1500:])
    ctx.dev = seeded_records(args.dev, vocab, 1500, args.seed)
    ctx.dev_file = write_jsonl(ctx.work / "dev.jsonl", ctx.dev)
    langs = {lg: sum(r.language == lg for r in ctx.dev) for lg in ("de", "en")}
    print(f"sample (seed {args.seed}): train 1,500 + 1,500 other, dev {len(ctx.dev)} {langs}")
    ctx.project = ctx.work / "project"
    if not (ctx.project / "model").exists():
        run("train", str(ctx.project), "--vocab", str(args.vocab), "--train",
            str(ctx.train_file), *[a for k, v in SMALL.items()
                                   for a in ("--param", f"{k}={v}")])
    rng = random.Random(args.seed)
    for name in args.only.split(","):
        SCENARIOS[name](ctx, rng)


if __name__ == "__main__":
    main()
