"""A full disk on each CLI write path (``disk``, issue 46; root: it mounts a tmpfs)."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

from benchmarks.faults.common import run
from benchmarks.faults.download import rows_of


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
            before, rows = tree(project), rows_of(db)
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
            lost += rows if rows_of(db) != rows else 0
            ballast.unlink()
            ok &= run(*args, check=False).returncode == 0 and rows_of(db) == rows
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
