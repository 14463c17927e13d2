"""`tagalign serve --allow-learn` killed under load and restarted (``server``): every
acknowledged learn is in the feedback store."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from benchmarks._common import free_port
from benchmarks.faults.common import CLI, read_lines, report, run


def feedback_ids(project: Path, out: Path) -> set[str]:
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
        stored = feedback_ids(project, ctx.work / "feedback.jsonl")
        missing = [rid for rid in seen if rid not in stored]
        lost += len(missing)
        survived += not missing
        acked_total += len(seen)
    report("server", kills, survived, lost, learn_acknowledged=acked_total)
