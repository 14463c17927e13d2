"""What the fault scenarios share: the CLI as a child process, a run killed -9 at a
moment, the output files read back, a scenario's row."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
