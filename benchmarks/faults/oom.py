"""A `serve --workers 2` worker killed by a tight memory cgroup (``oom``, issue 46)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

from benchmarks._common import free_port
from benchmarks.faults.common import CLI, report
from benchmarks.faults.server import feedback_ids


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
    stored = feedback_ids(project, ctx.work / "feedback-oom.jsonl")
    lost = len(set(state["acked"]) - stored)
    report("oom", injected, survived, lost, learn_acknowledged=len(state["acked"]),
           failed_requests=state["failed"], replaced_and_serving_s=waits,
           log_lines=lines, metric=restarts, server_exit=code)
