"""Faults survived (issue 30): kill -9 at seeded random moments, then restart or resume.

    python -m benchmarks.faults --work runs/faults [--kills 20] [--only suggest,server]

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
- ``downloads`` (issue 46): ``--kills`` pairs of downloads of two versions into one
  folder started at once (one of each pair with ``--wait``), then as many downloads while
  `serve` reloads the folder in a loop and `serve --workers 2` gets SIGHUP: the folder
  holds one version whole with its feedback, every answer is the model's its
  X-Model-Version names ("mixes seen" must be 0); the row says what the users saw.
- ``store_disk`` / ``postgres`` (issue 46): `serve --allow-learn` under learn + suggest load
  while the SQLite store's tmpfs is filled, or a real PostgreSQL store is restarted,
  stopped for 30 s and the server killed: learns answer 200, 507 or 503 only, suggests
  keep answering, no acknowledged decision lost.
- ``oom`` / ``ray_kill`` / ``ray_disk`` (issue 46): a `serve --workers 2` worker put into a
  tight memory cgroup until the kernel kills it (replaced, the other serving, no learn
  lost); a Ray worker killed mid-shard (output equal, nothing doubled); Ray shards on a
  full tmpfs (one `error:` line, finished shards kept, the rerun completes).
- ``disk`` (root: it mounts a size-limited tmpfs): a full disk during `train`, `suggest
  --output` (JSONL and MARC), `download --force` of an update and `upload` to a file://
  store, at seeded random fill levels: one `error:` line naming the path, what was
  finished kept, the rerun completes (`scenario_disk`); a row per path.
- ``soak``: ``--soak-minutes`` (5) of a mixed load from 16 clients on ``--soak-project``
  served with 2 workers (`benchmarks/soak.py` says what the load holds): failed requests,
  each worker's RSS growth over the last 40 % of the run, p95 of the last tenth against the
  first.

Prints per scenario: kills, survivals, records lost (must be 0), and the figures above.
The sample: seeded draws of the shared LLMs4Subjects train/dev (both languages, all types).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks._common import DATA, free_port, seeded_records, suggestions

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
    from benchmarks._common import seeded_sample
    from benchmarks.soak import run_soak, summary

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



# -- downloads: two into one folder at once, and one while servers reload it (issue 46) -----
def _holds(folder: Path, manifests: dict[str, dict]) -> str:
    """Which archive ``folder`` holds whole ("A"/"B"), or "mix"; its feedback files aside."""
    import hashlib

    files = {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in folder.rglob("*") if p.is_file()
             and not p.name.startswith("feedback.sqlite")}
    return next((name for name, m in manifests.items()
                 if files == {rel: e["sha256"] for rel, e in m["files"].items()}), "mix")


def _download(url: str, into: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "download", url, "--into", str(into), "--force", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _saw(proc: subprocess.Popen, err: str) -> str:
    """What a download's user saw: ok, waited, refused (the other's pid named), or failed."""
    if "Traceback" in err:
        return "traceback"
    if proc.returncode == 0:
        return "waited" if "waiting up to" in err else "ok"
    return "refused" if "another download into" in err and "(pid " in err else "failed"


def scenario_downloads(ctx, rng: random.Random) -> None:
    """``--kills`` pairs of `tagalign download --force` of two versions into one folder
    started at once (one of each pair with ``--wait``, drawn), then as many downloads while
    two servers of the folder reload (`serve`: ``POST …/reload`` in a loop; `serve
    --workers 2`: SIGHUP at a drawn moment). After each: the folder holds one version
    whole with its feedback, and every answer is the one its X-Model-Version gives."""
    import httpx

    from benchmarks._common import serve_process
    from tagalign.project import model_version
    from tagalign.shipping import download as fetch

    other = ctx.work / "project-other"
    if not (other / "model").exists():
        run("train", str(other), "--vocab", str(ctx.vocab_file), "--train",
            str(ctx.other_train_file), *[a for k, v in SMALL.items()
                                         for a in ("--param", f"{k}={v}")])
    store, root = ctx.work / "store-versions", ctx.work / "downloads"
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    urls = {name: f"file://{store}/{name}.tar.gz" for name in "AB"}
    versions, manifests = {}, {}
    for name, project in zip("AB", (ctx.project, other), strict=True):
        run("upload", str(project), urls[name])
        manifests[name] = fetch(urls[name], root / f"probe-{name}")[1]
        versions[name] = model_version(project)["version"]
        shutil.rmtree(root / f"probe-{name}")
    folder = root / "proj"
    fetch(urls["A"], folder)
    db = folder / "feedback.sqlite"
    with sqlite3.connect(db) as con:
        # a table of its own: the servers add theirs (`tagalign.serve.feedback`), empty
        con.execute("create table kept (id text, subject text)")
        con.executemany("insert into kept values (?, ?)",
                        [(f"rec-{k}", "4015065-3") for k in range(50)])

    def rows() -> int:
        with sqlite3.connect(db) as con:
            return con.execute("select count(*) from kept").fetchone()[0]

    pairs = pairs_survived = mixes = lost = 0
    saw: dict[str, int] = {}
    for _ in range(ctx.kills):  # two downloads at once
        waits = rng.sample([[], ["--wait", "600"]], 2)
        procs = [_download(urls[name], folder, *wait)
                 for name, wait in zip(rng.sample("AB", 2), waits, strict=True)]
        seen = []
        for proc in procs:
            _, err = proc.communicate(timeout=900)
            seen.append(_saw(proc, err))
            saw[seen[-1]] = saw.get(seen[-1], 0) + 1
        held, kept = _holds(folder, manifests), rows() == 50
        pairs += 1
        mixes += held == "mix"
        lost += 0 if kept else 50
        pairs_survived += held != "mix" and kept and not {"failed", "traceback"} & set(seen)

    queries = [{"title": r.title, "abstract": r.abstract, "language": r.language,
                "limit": 10} for r in rng.sample(ctx.dev, 5)]
    api = "/tagalign/v1/projects/proj"

    def answers(url: str) -> list[tuple[str, list | None]]:
        """Per query: the version that answered (or the HTTP status), its subjects."""
        out = []
        for q in queries:
            res = httpx.post(f"{url}{api}/suggest", json=q, timeout=120)
            out.append((res.headers.get("x-model-version", ""), [
                (r["id"], round(r["score"], 4)) for r in res.json()["results"]])
                if res.status_code == 200 else (f"HTTP {res.status_code}", None))
        return out

    def reload(url: str) -> httpx.Response:
        return httpx.post(f"{url}{api}/reload", timeout=600,
                          headers={"Content-Type": "application/json"})  # a JSON POST

    rounds = rounds_survived = reloads = refused = 0
    with serve_process(folder, "--no-compile-ranker") as (one, _), \
            serve_process(folder, "--no-compile-ranker", "--workers", "2") as (two, sup):
        expected: dict[str, list | None] = {}  # each version's answers, read at rest
        for name in ("AB" if _holds(folder, manifests) == "A" else "BA"):
            if _holds(folder, manifests) != name:
                fetch(urls[name], folder, force=True)
            reload(one)
            got = answers(one)
            expected[got[0][0]] = [g for _, g in got]
        assert set(expected) == set(versions.values()), (list(expected), versions)

        failed = 0

        def whole(got: list[tuple[str, list | None]]) -> bool:
            """No answer of two models mixed (a failed request is counted apart)."""
            nonlocal failed
            failed += sum(v.startswith("HTTP") for v, _ in got)
            return all(v.startswith("HTTP") or v in expected and
                       g == expected[v][i]  # type: ignore[index]
                       for i, (v, g) in enumerate(got))

        for i in range(ctx.kills):  # a download while both servers reload
            name = "AB"[i % 2]
            proc = _download(urls[name], folder)
            hup_at, hupped, ok = time.monotonic() + rng.uniform(0.0, 3.0), False, True
            while proc.poll() is None:
                res = reload(one)
                reloads += 1
                refused += res.status_code != 200
                if not hupped and time.monotonic() >= hup_at:
                    sup.send_signal(signal.SIGHUP)
                    hupped = True
                ok &= whole(answers(one)) and whole(answers(two))
            proc.communicate()
            held = _holds(folder, manifests)
            sup.send_signal(signal.SIGHUP)  # both servers end on the folder's version
            reload(one)
            deadline = time.monotonic() + 600
            while {v for v, _ in answers(two)} != {versions[name]} and \
                    time.monotonic() < deadline:
                ok &= whole(answers(two))
                time.sleep(0.5)  # the workers roll over one at a time
            final = [answers(one), answers(two)]
            ok &= all(whole(got) for got in final)
            current = {v for got in final for v, _ in got} == {versions[name]}
            rounds += 1
            mixes += held == "mix" or not ok
            lost += 0 if rows() == 50 else 50
            rounds_survived += proc.returncode == 0 and held == name and ok and \
                current and rows() == 50
    report("downloads", pairs + rounds, pairs_survived + rounds_survived, lost,
           mixes_seen=mixes, pairs=f"{pairs_survived}/{pairs}",
           reload_rounds=f"{rounds_survived}/{rounds}", failed_requests=failed,
           pairs_saw=saw, reloads_during_downloads=reloads, reloads_refused=refused)
# -- the feedback store fails under a live server (issue 46) ------------------------------
#: how long the PostgreSQL scenario keeps its database stopped
STORE_STOP_S = 30.0


def _store_row(name: str, faults: int, survived: int, lost: int, **figures) -> None:
    extra = "".join(f", {k} {v}" for k, v in figures.items())
    print(f"{name:9s} faults {faults:3d}, survived {survived:3d}, decisions lost {lost}{extra}",
          flush=True)


class _StoreServer:
    """`tagalign serve PROJECT --allow-learn ARGS` on a free port in a session of its own
    (kill -9 takes the supervisor and its workers), its output in ``log``."""

    def __init__(self, project: Path, *args: str, log: Path):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/tagalign/v1/projects/{project.name}"
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([*CLI, "serve", str(project), "--port", str(self.port),
                                          "--allow-learn", *args], stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 300
        while True:
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def warnings(self, phrase: str) -> int:
        return " ".join(self.log.read_text(errors="replace").split()).count(phrase)


def _store_load(ctx, url: str, tag: str):
    """Two learners (one new record id a request, a dev record's first 3 subjects) and
    one suggester (the dev records in turn)."""
    import zlib

    from tests.faultkit import MixedLoad

    dev = ctx.dev

    def learn(rid: str) -> dict:
        rec = dev[zlib.crc32(rid.encode()) % len(dev)]
        return {"records": [{"id": rid, "title": rec.title, "abstract": rec.abstract,
                             "language": rec.language, "subjects": rec.subjects[:3]}]}

    def suggest(k: int) -> dict:
        rec = dev[k % len(dev)]
        return {"title": rec.title, "abstract": rec.abstract, "limit": 10}

    return MixedLoad(url, learn, suggest, learners=2, suggesters=1, tag=tag)


def _wait(condition, timeout: float = 120) -> bool:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


def _merge(total: dict, statuses: dict) -> dict:
    for kind, by_status in statuses.items():
        for status, n in by_status.items():
            total.setdefault(kind, {}).setdefault(status, 0)
            total[kind][status] += n
    return total


def scenario_store_disk(ctx, rng: random.Random) -> None:
    """`serve --allow-learn` with its SQLite feedback store on a 64 MiB tmpfs, filled up
    ``--kills`` times under a learn + suggest load for a seeded 1-5 s, then freed: suggests
    must all answer 200, learns 200 or 507, and learn again once space is free (no
    restart); at the end the server is killed -9 and every acknowledged learn must be in
    the store."""
    from tests.faultkit import SmallDisk

    project = ctx.work / "served-store-disk"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ctx.project, project)
    log = ctx.work / "store-disk.log"
    log.unlink(missing_ok=True)
    with SmallDisk(ctx.work / "small-disk", 64 << 20) as disk:
        db = disk.path / "feedback.sqlite"
        db.unlink(missing_ok=True)
        server = _StoreServer(project, "--feedback-db", f"sqlite:///{db}", log=log)
        load = _store_load(ctx, server.url, "disk")
        faults = survived = full_refused = 0
        recovery: list[float] = []
        try:
            for _ in range(ctx.kills):
                t0 = time.time()
                _wait(lambda t=t0: load.count("learn", 200, t) >= 5)
                disk.fill()
                full = time.time()
                faults += 1
                time.sleep(rng.uniform(1.0, 5.0))
                disk.free()
                freed = time.time()
                back = _wait(lambda t=freed: load.count("learn", 200, t) >= 1)
                recovery.append(time.time() - freed)
                bad = [a for a in load.answers if a.at >= full and not (
                    a.status == 200 or (a.kind == "learn" and a.status == 507))]
                full_refused += load.count("learn", 507, full) > 0
                survived += back and not bad
            acked = list(load.acked)
            server.kill()
        finally:
            load.halt()
            server.kill()
        with sqlite3.connect(db) as con:
            intact = con.execute("pragma integrity_check").fetchone()[0] == "ok"
            stored = {r for (r,) in con.execute("select record_id from decisions")}
    lost = len(set(acked) - stored)
    _store_row("store_disk", faults, survived, lost, rounds_with_507=full_refused,
               learn_acknowledged=len(acked), statuses=load.statuses(),
               recovery_s_max=round(max(recovery, default=0), 2), integrity_ok=intact,
               no_space_warnings=server.warnings("no space left ("),
               disk_mib=64)


def scenario_postgres(ctx, rng: random.Random) -> None:
    """`serve --workers 2 --allow-learn --feedback-db postgresql://…` on a PostgreSQL
    cluster of its own (Debian's binaries) under a learn + suggest load: restarted
    ``--kills`` times (a seeded 1-3 s of load between), stopped for `STORE_STOP_S` s
    ``max(1, kills // 10)`` times, then ``max(1, kills // 5)`` servers killed -9 under
    the load. Suggests must all answer 200, learns 200 or 503 (with Retry-After), learns
    work again once the database is back without a server restart, and every
    acknowledged learn is in the database."""
    from tests.faultkit import PostgresCluster

    project = ctx.work / "served-postgres"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ctx.project, project)
    log = ctx.work / "store-postgres.log"
    log.unlink(missing_ok=True)
    statuses: dict = {}
    acked: list[str] = []
    faults = survived = 0
    restart_recovery: list[float] = []
    stop_recovery: list[float] = []
    with PostgresCluster() as pg:
        db = pg.database("faults")
        args = ("--workers", "2", "--feedback-db", db)
        server = _StoreServer(project, *args, log=log)
        load = _store_load(ctx, server.url, "pg")
        try:
            _wait(lambda: load.count("learn", 200) >= 5)
            for kind in ["restart"] * ctx.kills + ["stop"] * max(1, ctx.kills // 10):
                time.sleep(rng.uniform(1.0, 3.0))
                start = time.time()
                if kind == "restart":
                    pg.restart()
                else:
                    pg.stop()
                    time.sleep(STORE_STOP_S)
                    pg.start()
                faults += 1
                up = time.time()
                back = _wait(lambda t=up: load.count("learn", 200, t) >= 1)
                (restart_recovery if kind == "restart" else stop_recovery).append(
                    time.time() - up)
                _wait(lambda t=up: load.count("suggest", None, t) >= 1)
                bad = [a for a in load.answers if a.at >= start and not (
                    a.status == 200 or (a.kind == "learn" and a.status == 503
                                        and a.retry_after))]
                survived += back and not bad
            warnings = server.warnings("its database is unavailable")
            acked += load.acked
            server.kill()
        finally:
            load.halt()
            server.kill()
        _merge(statuses, load.statuses())
        kills = max(1, ctx.kills // 5)
        killed_ok = 0
        for i in range(kills):
            server = _StoreServer(project, *args, log=log)
            load = _store_load(ctx, server.url, f"kill{i}")
            try:
                _wait(lambda lo=load: lo.count("learn", 200) >= 3)
                time.sleep(rng.uniform(0.5, 3.0))
                server.kill()
                seen = list(load.acked)
            finally:
                load.halt()
                server.kill()
            _merge(statuses, load.statuses())
            acked += seen
            faults += 1
            from tagalign.serve.feedback import FeedbackStore

            store = FeedbackStore(db)
            with store.engine.connect() as conn:
                stored = {r for (r,) in conn.exec_driver_sql("select record_id from decisions")}
            store.close()
            killed_ok += not set(seen) - stored
        survived += killed_ok
    lost = len(set(acked) - stored)
    _store_row("postgres", faults, survived, lost, restarts=ctx.kills,
               stops=f"{max(1, ctx.kills // 10)}x{STORE_STOP_S:.0f}s", kills=kills,
               learn_acknowledged=len(acked), statuses=statuses,
               restart_recovery_s_max=round(max(restart_recovery, default=0), 2),
               stop_recovery_s_max=round(max(stop_recovery, default=0), 2),
               outage_warnings=warnings)


# -- disk full (issue 46) ---------------------------------------------------------------
def scenario_disk(ctx, rng: random.Random) -> None:
    """A full disk on each CLI write path: a tmpfs (root only) the size of the job, filled
    by a ballast file that leaves a seeded random share of the room the job needs. Each
    fault must end in one ``error: no space left on device writing PATH …`` line (exit 1),
    keep what was finished (the project before, its feedback, an archive before, the
    finished prediction lines), leave no hidden temporary file, and the rerun after the
    ballast is deleted must complete: for suggest, equal to an uninterrupted run record
    for record. ``max(1, --kills // 4)`` faults per path."""
    import hashlib

    from tagalign.io import InputReport
    from tagalign.records.marc.reader import iter_marc_records
    from tagalign.shipping import project_files

    n = max(1, ctx.kills // 4)
    fs = ctx.work / "disk-fs"

    def mount(size: int) -> bool:
        fs.mkdir(exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size // 1024 + 1}k",
                               "tmpfs", str(fs)], capture_output=True, text=True)
        if done.returncode:
            print(f"disk      skipped: cannot mount a tmpfs ({done.stderr.strip()})")
        return done.returncode == 0

    def umount() -> None:
        subprocess.run(["umount", "-l", str(fs)], check=True)

    def fill(leave: int) -> Path:
        ballast = fs / "ballast"
        size = shutil.disk_usage(fs).free - leave
        with open(ballast, "ab") as fh:
            while size > 0:
                fh.write(bytes(min(size, 1 << 20)))
                size -= 1 << 20
        return ballast

    def tree(folder: Path) -> dict[str, str]:
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(folder.rglob("*")) if p.is_file()}

    def du(folder: Path) -> int:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

    def seen(res: subprocess.CompletedProcess) -> tuple[str | None, str]:
        """(The one error line of a run that stopped on a full disk as it must, else None;
        what the user saw last)."""
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        last = (res.stderr.strip().splitlines() or [""])[-1]
        if res.returncode != 1 or len(lines) != 1 or "Traceback" in res.stderr \
                or "no space left on device writing" not in lines[0]:
            return None, last
        return lines[0], lines[0]

    def hidden(folder: Path) -> list[Path]:
        return list(folder.rglob(".*"))

    def row(path: str, faults: int, survived: int, lost: int, saw: str) -> None:
        saw = saw.replace(str(fs), "FS").replace(str(ctx.work), "WORK")
        print(f"disk {path:16s} faults {faults:3d}, survived {survived:3d}, records lost "
              f"{lost}, user saw: {saw}", flush=True)

    # train: a phase's write into the project folder; the model before is kept
    model_size = du(ctx.project)
    if not mount(4 * model_size + (8 << 20)):
        return
    try:
        faults = survived = lost = 0
        saw = ""
        for _ in range(n):
            project = fs / "p"
            shutil.rmtree(project, ignore_errors=True)
            shutil.copytree(ctx.project, project)
            before = tree(project)
            ballast = fill(int(rng.uniform(0.05, 1.5) * model_size))
            res = run("train", str(project), "--train", str(ctx.train_file), check=False)
            if res.returncode == 0:  # it had room enough: no fault
                ballast.unlink()
                continue
            faults += 1
            line, saw = seen(res)
            work = project / "work"
            kept = {k: v for k, v in tree(project).items() if not k.startswith("work/")}
            phases = list(work.iterdir()) if work.exists() else []
            ok = line is not None and kept == before and not hidden(project) and \
                all((p / "phase.json").is_file() for p in phases)
            lost += kept != before
            ballast.unlink()
            res = run("train", str(project), "--train", str(ctx.train_file), check=False)
            ok &= res.returncode == 0 and not work.exists() and \
                res.stderr.count("finished earlier") >= len(phases)
            survived += ok
        row("train", faults, survived, lost, saw)
    finally:
        umount()

    # suggest --output, JSONL and MARC: the finished lines kept, a cut one made again
    for fmt, name in (("jsonl", "pred.jsonl"), ("marc", "pred.mrc")):
        args = ["suggest", str(ctx.project), "-i", str(ctx.dev_file), "--format", fmt,
                "--batch-size", "50", "--jobs", "1"]
        ref = ctx.work / f"disk-ref-{name}"
        run(*args, "-o", str(ref))

        def ids(path: Path, fmt: str = fmt) -> list[str]:
            if fmt == "marc":
                quiet = InputReport(stream=io.StringIO(), max_shown=0)
                return [rec.id for _, rec in iter_marc_records(path, quiet)]
            out = []
            for line in path.read_text("utf-8", errors="replace").splitlines():
                with contextlib.suppress(ValueError):  # the line the full disk cut
                    out.append(json.loads(line)["id"])
            return out

        def same_day(data: bytes) -> bytes:
            return re.sub(rb"\x1fd\d{8}", b"", data)  # MARC's 883 $d

        want = ids(ref)
        size = ref.stat().st_size
        if not mount(3 * size + (1 << 20)):
            return
        try:
            faults = survived = lost = 0
            saw = ""
            for _ in range(n):
                out = fs / name
                for f in fs.iterdir():
                    f.unlink()
                ballast = fill(int(rng.uniform(0.05, 0.95) * size))
                res = run(*args, "-o", str(out), check=False)
                if res.returncode == 0:
                    ballast.unlink()
                    continue
                faults += 1
                line, saw = seen(res)
                partial = fs / f"{name}.partial"
                found = re.search(r"\((\d+) finished records are kept", line or "")
                kept = int(found.group(1)) if found else -1
                whole = ids(partial) if partial.exists() else []
                ok = 0 <= kept <= len(whole) and whole == want[:len(whole)] \
                    and not out.exists()
                ballast.unlink()
                res = run(*args, "-o", str(out), "--resume", check=False)
                got = ids(out) if out.exists() else []
                lost += len(set(want) - set(got))
                ok &= res.returncode == 0 and got == want and \
                    same_day(out.read_bytes()) == same_day(ref.read_bytes())
                survived += ok
            row(f"suggest ({fmt})", faults, survived, lost, saw)
        finally:
            umount()

    # download --force of an update: the project before and its feedback kept
    store = ctx.work / "disk-store"
    shutil.rmtree(store, ignore_errors=True)
    run("upload", str(ctx.project), f"file://{store}/p.tar.gz")
    url = f"file://{store}/p.tar.gz"
    files = list(project_files(ctx.project))
    need = sum(p.stat().st_size for _, p in files)
    if not mount(3 * need + 4096 * len(files) + (1 << 20)):
        return
    try:
        faults = survived = lost = 0
        saw = ""
        for i in range(n):
            project = fs / "p"
            shutil.rmtree(project, ignore_errors=True)
            shutil.copytree(ctx.project, project)
            db = project / "feedback.sqlite"
            with sqlite3.connect(db) as con:
                con.execute("create table decisions (id text, subject text)")
                con.executemany("insert into decisions values (?, ?)",
                                [(f"rec-{i}-{k}", "4015065-3") for k in range(50)])
            con.close()
            before, rows = tree(project), _rows_of(db)
            # below the listed bytes: refused before writing; above: the blocks run out
            ballast = fill(int(rng.uniform(0.5 * need, need + 4096 * len(files))))
            args = ["download", url, "--into", str(project), "--force"]
            res = run(*args, check=False)
            if res.returncode == 0:
                ballast.unlink()
                continue
            faults += 1
            line, saw = seen(res)
            ok = line is not None and tree(project) == before and \
                sorted(p.name for p in fs.iterdir()) == ["ballast", "p"]
            lost += rows if _rows_of(db) != rows else 0
            ballast.unlink()
            ok &= run(*args, check=False).returncode == 0 and _rows_of(db) == rows
            survived += ok
        row("download --force", faults, survived, lost, saw)
    finally:
        umount()

    # upload to a file:// store: an archive there before is kept, no partial archive left
    archive_size = (store / "p.tar.gz").stat().st_size
    if not mount(3 * archive_size + (1 << 20)):
        return
    try:
        faults = survived = lost = 0
        saw = ""
        url = f"file://{fs}/store/p.tar.gz"
        run("upload", str(ctx.project), url)
        earlier = (fs / "store" / "p.tar.gz").read_bytes()
        for _ in range(n):
            ballast = fill(int(rng.uniform(0.05, 0.95) * archive_size))
            res = run("upload", str(ctx.project), url, check=False)
            if res.returncode == 0:
                ballast.unlink()
                earlier = (fs / "store" / "p.tar.gz").read_bytes()
                continue
            faults += 1
            line, saw = seen(res)
            kept = (fs / "store" / "p.tar.gz").read_bytes() == earlier
            lost += not kept
            ok = line is not None and kept and \
                sorted(p.name for p in (fs / "store").iterdir()) == ["p.tar.gz"]
            ballast.unlink()
            fetched = ctx.work / "disk-fetched"
            shutil.rmtree(fetched, ignore_errors=True)
            ok &= run("upload", str(ctx.project), url, check=False).returncode == 0 and \
                run("download", url, "--into", str(fetched), check=False).returncode == 0
            earlier = (fs / "store" / "p.tar.gz").read_bytes()
            survived += ok
        row("upload", faults, survived, lost, saw)
    finally:
        umount()


SCENARIOS = {"train": scenario_train, "suggest": scenario_suggest, "batch": scenario_batch,
             "server": scenario_server, "download": scenario_download,
             "downloads": scenario_downloads, "disk": scenario_disk,
             "store_disk": scenario_store_disk, "postgres": scenario_postgres}


# -- issue 46: workers that die (a memory limit, a Ray worker killed, a full disk) -----------
def _memory_group(pid: int, headroom: int, name: str) -> Path | None:
    """Put ``pid`` alone into a new memory cgroup below its own, limited to what it charges
    from now on plus ``headroom`` bytes, no swap (cgroup v1 or v2; root only). The group's
    folder, or None when the machine cannot."""
    if os.geteuid() != 0:
        return None
    root = Path("/sys/fs/cgroup")
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        v1 = "memory" in controllers.split(",")
        parent = root / "memory" / rel.lstrip("/") if v1 else root / rel.lstrip("/")
        if v1 or (controllers == "" and (parent / "memory.max").exists()):
            group = parent / name
            group.mkdir()
            (group / "cgroup.procs").write_text(str(pid))
            if v1:
                limit = int((group / "memory.usage_in_bytes").read_text()) + headroom
                (group / "memory.limit_in_bytes").write_text(str(limit))
                if (group / "memory.memsw.limit_in_bytes").exists():
                    (group / "memory.memsw.limit_in_bytes").write_text(str(limit))
            else:
                limit = int((group / "memory.current").read_text()) + headroom
                (group / "memory.max").write_text(str(limit))
                if (group / "memory.swap.max").exists():
                    (group / "memory.swap.max").write_text("0")
            return group
    return None


def _oom_kills(group: Path) -> int:
    name = "memory.oom_control" if (group / "memory.oom_control").exists() else "memory.events"
    for line in (group / name).read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def _workers(url: str, pid: str) -> set[int]:
    import httpx

    try:
        return {w["pid"] for w in httpx.get(f"{url}/projects/{pid}", timeout=30).json()["workers"]}
    except (httpx.HTTPError, KeyError, ValueError):
        return set()


def _spread_load(kind: str, url: str, pid: str, dev: list, state: dict, stop: threading.Event,
                 n: int) -> None:
    """Like `_load` (and ``batch``: suggest-batch of 256 records), but each request on a
    new connection, so the kernel hands them to every worker (a kept-alive connection
    stays with one); the worker of each suggest answered, with its time, and the requests
    that failed."""
    import httpx

    k = 0
    while not stop.is_set():
        rec = dev[k % len(dev)]
        try:
            if kind == "learn":
                rid = f"oom-{n}-{k}"
                res = httpx.post(f"{url}/projects/{pid}/learn", timeout=60, json={"records": [{
                    "id": rid, "title": rec.title, "abstract": rec.abstract,
                    "language": rec.language, "subjects": rec.subjects[:3]}]})
                if res.status_code == 200:
                    state["acked"].append(rid)
            else:  # one record, or a batch of 256 (a burst of memory in the worker)
                batch = [{"title": r.title, "abstract": r.abstract}
                         for r in (dev[(k + j) % len(dev)] for j in range(256))]
                res = httpx.post(f"{url}/projects/{pid}/suggest-batch", timeout=60, json={
                    "records": batch, "limit": 10}) if kind == "batch" else httpx.post(
                    f"{url}/projects/{pid}/suggest", timeout=60, json={
                        "title": rec.title, "abstract": rec.abstract, "limit": 10})
                if res.status_code == 200:
                    state["answered"].append((time.time(), int(res.headers["x-worker"])))
            state["failed"] += res.status_code != 200
        except httpx.HTTPError:
            state["failed"] += 1
        k += 1


def scenario_oom(ctx, rng: random.Random) -> None:
    """`serve --workers 2 --allow-learn` under a load of learn, suggest and suggest-batch
    requests (256 records: a burst of memory), one thread each; ``--kills`` times a
    worker drawn with the seed is put alone into a memory cgroup with 2-6 MiB (drawn) of
    headroom over what it holds, until the kernel's OOM killer ends it."""
    import httpx

    project = ctx.work / "served-oom"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ctx.project, project)
    port = free_port()
    url = f"http://127.0.0.1:{port}/tagalign/v1"
    log = ctx.work / "oom-serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([*CLI, "serve", str(project), "--port", str(port),
                                   "--workers", "2", "--allow-learn"], stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.time()
    while len(_workers(url, project.name)) < 2:
        if server.poll() is not None or time.time() - t0 > 600:
            raise SystemExit(f"server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    state: dict = {"acked": [], "answered": [], "failed": 0}
    stop = threading.Event()
    threads = [threading.Thread(target=_spread_load, args=(k, url, project.name, ctx.dev,
                                                           state, stop, n))
               for n, k in enumerate(("learn", "suggest", "batch"))]
    for t in threads:
        t.start()
    injected = survived = 0
    waits = []
    try:
        for i in range(ctx.kills):
            workers = sorted(_workers(url, project.name))
            victim = rng.choice(workers)
            (survivor,) = set(workers) - {victim}
            group = _memory_group(victim, rng.randint(2, 6) * 2**20,
                                  f"tagalign-oom-{os.getpid()}-{i}")
            if group is None:
                print("oom       skipped: needs root and a memory cgroup")
                return
            start = time.time()
            while Path(f"/proc/{victim}").exists() and time.time() - start < 120:
                time.sleep(0.05)
            died = time.time()
            injected += _oom_kills(group)
            while time.time() - died < 120:  # replaced, the survivor serving on
                now = _workers(url, project.name)
                if len(now) == 2 and victim not in now and survivor in now and any(
                        t > died and w == survivor for t, w in state["answered"]):
                    survived += 1
                    waits.append(round(time.time() - died, 1))
                    break
                time.sleep(0.1)
            if Path(f"/proc/{victim}").exists():  # not killed in time: back where it was
                (group.parent / "cgroup.procs").write_text(str(victim))
            while (group / "cgroup.procs").read_text().strip() and time.time() - died < 150:
                time.sleep(0.1)  # the killed worker reaped
            group.rmdir()
    finally:
        stop.set()
        for t in threads:
            t.join()
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        server.terminate()
        code = server.wait(120)
    restarts = [line for line in metrics.splitlines()
                if line.startswith("tagalign_worker_restarts_total")]
    text = " ".join(log.read_text(errors="replace").split())
    lines = text.count("(out of memory?); started worker")
    stored = _feedback_ids(project, ctx.work / "feedback-oom.jsonl")
    lost = len(set(state["acked"]) - stored)
    report("oom", injected, survived, lost, learn_acknowledged=len(state["acked"]),
           failed_requests=state["failed"], replaced_and_serving_s=waits,
           log_lines=lines, metric=restarts, server_exit=code)


def _ray_workers(root: int) -> list:
    """Ray's processes below ``root`` (each names itself ``ray::…``)."""
    import psutil

    out = []
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return out
    for proc in children:
        try:
            if proc.cmdline()[0].startswith("ray::"):
                out.append(proc)
        except (psutil.Error, IndexError):
            continue
    return out


def _kill_one_mid_shard(root: int, src: Path, done: subprocess.Popen) -> int | None:
    """SIGKILL a Ray worker below ``root`` while it reads a shard of ``src`` (held with
    SIGSTOP while that is checked); its pid, or None when the run ended first."""
    import psutil

    while done.poll() is None:
        for proc in _ray_workers(root):
            try:
                if any(f.path == str(src) for f in proc.open_files()):
                    proc.send_signal(signal.SIGSTOP)
                    if any(f.path == str(src) for f in proc.open_files()):
                        proc.send_signal(signal.SIGKILL)
                        return proc.pid
                    proc.send_signal(signal.SIGCONT)
            except psutil.Error:
                continue
        time.sleep(0.01)
    return None


def _shard_rows(folder: Path) -> tuple[dict[str, dict], int]:
    return by_id([r for p in sorted(folder.glob("part-*.jsonl")) for r in read_lines(p)])


def _ray_args(ctx) -> list[str]:
    # batches of 10: a worker reads its shard's records as it tags them, so it holds the
    # input open for most of the shard (the sign `_kill_one_mid_shard` waits for); with
    # the default 512 it reads a shard of 100 at once and tags with the file closed
    return ["suggest", str(ctx.project), "-i", str(ctx.dev_file), "--engine", "ray",
            "--num-workers", "2", "--shard-size", "100", "--batch-size", "10"]


def _ray_reference(ctx) -> tuple[Path, float]:
    """An uninterrupted Ray run's output folder and seconds (once per benchmark run)."""
    if getattr(ctx, "ray_ref", None) is None:
        ref = ctx.work / "ray-ref"
        shutil.rmtree(ref, ignore_errors=True)
        ctx.ray_ref = ref, timed(lambda: run(*_ray_args(ctx), "-o", str(ref)))
    return ctx.ray_ref


def scenario_ray_kill(ctx, rng: random.Random) -> None:
    """`suggest --engine ray` (2 workers, shards of 100), one Ray worker killed with
    SIGKILL while it reads a shard, at a moment drawn after the run's start; the run goes
    on to its end (no rerun): its output must equal an uninterrupted run's."""
    ref, length = _ray_reference(ctx)
    want, _ = _shard_rows(ref)
    kills = survived = lost = doubled = 0
    codes = []
    for i in range(ctx.kills):
        out = ctx.work / f"ray-kill-{i}"
        shutil.rmtree(out, ignore_errors=True)
        err = ctx.work / "ray-kill.stderr"
        with open(err, "w") as fh:
            proc = subprocess.Popen([*CLI, *_ray_args(ctx), "-o", str(out)],
                                    stdout=subprocess.DEVNULL, stderr=fh, start_new_session=True)
        time.sleep(rng.uniform(0.2, 0.7) * length)
        killed = _kill_one_mid_shard(proc.pid, ctx.dev_file, proc)
        codes.append(proc.wait())
        kills += killed is not None
        got, twice = _shard_rows(out)
        lost += len(set(want) - set(got))
        doubled += twice
        survived += codes[-1] == 0 and got == want and not list(out.glob(".*.tmp"))
        shutil.rmtree(out)
    report("ray_kill", kills, survived, lost, doubled=doubled, exit_codes=codes,
           uninterrupted_s=round(length, 1))


def scenario_ray_disk(ctx, rng: random.Random) -> None:
    """`suggest --engine ray` into a tmpfs of 30-70 % (drawn) of the output's size: the run
    must stop with one `error:` line naming the path and "no space left", keep whole the
    shards its manifest lists, leave no temporary file, and complete once the tmpfs is
    made large enough (a remount) and the same command runs again."""
    if os.geteuid() != 0:
        print("ray_disk  skipped: needs root to mount a size-limited tmpfs")
        return
    ref, length = _ray_reference(ctx)
    want, _ = _shard_rows(ref)
    total = sum(p.stat().st_size for p in ref.iterdir())
    mount = ctx.work / "small-disk"
    mount.mkdir(exist_ok=True)
    faults = survived = lost = kept = 0
    seen: list[str] = []
    for _ in range(ctx.kills):
        size = max(64, int(rng.uniform(0.3, 0.7) * total) // 1024)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}k", "tmpfs", str(mount)],
                       check=True)
        try:
            out = mount / "out"
            first = run(*_ray_args(ctx), "-o", str(out), check=False)
            faults += first.returncode != 0
            errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
            seen.append(errors[0] if errors else (first.stderr.strip().splitlines()
                                                  or [f"exit {first.returncode}"])[-1])
            manifest = json.loads((out / "manifest.json").read_text())
            whole = all((out / f"part-{sid}.jsonl").read_bytes()
                        == (ref / f"part-{sid}.jsonl").read_bytes() for sid in manifest["shards"])
            kept += len(manifest["shards"])
            clean = not list(out.glob(".*.tmp"))
            subprocess.run(["mount", "-o", f"remount,size={2 * total // 1024 + 1024}k",
                            str(mount)], check=True)
            again = run(*_ray_args(ctx), "-o", str(out), check=False)
            got, twice = _shard_rows(out)
            lost += len(set(want) - set(got)) + twice
            survived += (first.returncode != 0 and len(errors) == 1 and "Traceback" not in
                         first.stderr and whole and clean and again.returncode == 0
                         and got == want)
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    report("ray_disk", faults, survived, lost, shards_kept=kept, user_saw=sorted(set(seen)),
           uninterrupted_s=round(length, 1))


SCENARIOS.update(oom=scenario_oom, ray_kill=scenario_ray_kill, ray_disk=scenario_ray_disk)
SCENARIOS.update(soak=scenario_soak)


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
