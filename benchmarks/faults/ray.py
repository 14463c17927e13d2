"""A Ray worker killed mid-shard (``ray_kill``) and Ray shards on a full tmpfs
(``ray_disk``), issue 46."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

from benchmarks.faults.common import CLI, by_id, read_lines, report, run, timed


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
