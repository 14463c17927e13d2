"""`tagalign download` killed mid-update (``download``), and downloads racing each other
and reloads (``downloads``, issue 46): the folder holds one version whole with its
feedback."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from benchmarks.faults.common import CLI, SMALL, attempts, killed_run, report, run, timed


def rows_of(db: Path) -> int:
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
        rows = rows_of(db)
        args = ["download", url, "--into", str(served), "--force"]
        if length is None:
            probe = ctx.work / "probe-dl"
            shutil.rmtree(probe, ignore_errors=True)
            length = timed(lambda p=probe: run("download", url, "--into", str(p)))
        killed, _ = killed_run(args, rng.uniform(0.2, 0.8 * length))
        kills += killed
        ok = (served / "project.json").exists() and (served / "model").exists() and \
            db.exists() and rows_of(db) == rows
        survived += ok
        lost += 0 if db.exists() and rows_of(db) == rows else rows
        run(*args)  # a rerun completes the update, keeping the feedback
        if not db.exists() or rows_of(db) != rows:
            lost += rows
    report("download", kills, survived, lost, archive=archive.strip()[-40:],
           uninterrupted_s=round(length or 0, 1))


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
        # a table of its own: the servers add theirs (`tagalign.feedback`), empty
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
