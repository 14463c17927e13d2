"""`tagalign serve --workers 2`: two worker processes behind one port (a real server in a
subprocess, tiny hybrids). Both answer; a record learned through one is used by the
other; a reload through one reaches both; SIGTERM to the supervisor lets a request in
flight finish, stops both workers and exits 0; a worker killed is replaced by one that
has learned the same, and one killed by the kernel for its memory (a cgroup's limit) is
replaced while the other serves on, nothing acknowledged lost, the log and ``/metrics``
saying so; a worker that cannot start stops the server with its error."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from serving import HeldRequest, MetricSamples, ServeProcess, free_port, refused
from tagalign.project import model_version
from test_serve_reload import API, LEARNED, QUERY, T, answers, reload, swap_in

ZUKUNFT = LEARNED["subjects"][0]


def until_both(fetch, deadline: float = 120) -> dict[int, list]:
    """Call ``fetch()`` → (worker pid, value) from 4 threads, each call on a new
    connection, until two workers have answered; their values by pid."""
    by_pid: dict[int, list] = {}
    end = time.time() + deadline
    with ThreadPoolExecutor(4) as pool:
        while len(by_pid) < 2:
            assert time.time() < end, f"one worker answered all: {list(by_pid)}"
            for pid, value in pool.map(lambda _: fetch(), range(8)):
                by_pid.setdefault(pid, []).append(value)
    return by_pid


CGROUP_ROOT = Path("/sys/fs/cgroup")


class MemoryGroup:
    """A memory cgroup of its own, made below the one ``pid`` is in, holding ``pid`` alone
    with a limit of what it charges from now on plus ``headroom`` bytes (cgroup v1: pages
    it used before stay charged to its old group, so the limit is on what it allocates or
    copies from a shared page from here on; no swap, so reaching it is an OOM kill)."""

    def __init__(self, pid: int, headroom: int):
        self.pid, self.headroom = pid, headroom
        self.path: Path | None = None
        self.v1 = True

    @staticmethod
    def parent_of(pid: int) -> tuple[Path, bool] | None:
        """The memory cgroup folder ``pid`` is in and whether it is cgroup v1."""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if "memory" in controllers.split(","):
                return CGROUP_ROOT / "memory" / rel.lstrip("/"), True
            if controllers == "" and (CGROUP_ROOT / rel.lstrip("/") / "memory.max").exists():
                return CGROUP_ROOT / rel.lstrip("/"), False
        return None

    def __enter__(self) -> MemoryGroup:
        found = self.parent_of(self.pid) if os.geteuid() == 0 else None
        if found is None:
            pytest.skip("needs root and a memory cgroup (v1 or v2) to limit one worker's "
                        "memory")
        parent, self.v1 = found
        self.path = parent / f"tagalign-oom-{self.pid}"
        try:
            self.path.mkdir()
            (self.path / "cgroup.procs").write_text(str(self.pid))
            if self.v1:
                used = int((self.path / "memory.usage_in_bytes").read_text())
                (self.path / "memory.limit_in_bytes").write_text(str(used + self.headroom))
                swap = self.path / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(used + self.headroom))
            else:
                used = int((self.path / "memory.current").read_text())
                (self.path / "memory.max").write_text(str(used + self.headroom))
                if (self.path / "memory.swap.max").exists():
                    (self.path / "memory.swap.max").write_text("0")
        except OSError as exc:
            self.__exit__()
            pytest.skip(f"the kernel refused a memory cgroup below {parent}: {exc}")
        return self

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.v1 else "memory.events"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def __exit__(self, *exc: object) -> None:
        if self.path is None or not self.path.exists():
            return
        procs = self.path / "cgroup.procs"
        if Path(f"/proc/{self.pid}").exists():  # not killed (a failed test): back it goes
            (self.path.parent / "cgroup.procs").write_text(str(self.pid))
        deadline = time.time() + 30  # empty once the killed process is reaped
        while procs.read_text().strip() and time.time() < deadline:
            time.sleep(0.1)
        self.path.rmdir()


class Load:
    """Learn requests (a new record each, its id kept once acknowledged), single suggests
    and batches of 64 (a burst of memory in the worker), one thread each, every request
    on a new connection (so the kernel hands them to both workers), until stopped; which
    worker answered each suggest, and when."""

    def __init__(self, url: str):
        self.url = url
        self.acked: list[str] = []
        self.answered: list[tuple[float, int]] = []  # (time, worker pid) of each suggest
        self.failed = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(kind,), daemon=True)
                        for kind in ("learn", "suggest", "batch")]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(T)

    def run(self, kind: str) -> None:
        k = 0
        while not self.stop.is_set():
            k += 1
            words = " ".join(f"w{kind}x{k}x{i}" for i in range(200))  # new strings to hold
            record = {"title": "Pilze der Zukunft", "abstract": words}
            try:
                if kind == "learn":
                    res = httpx.post(f"{self.url}{API}/learn", timeout=T, json={"records": [
                        {**record, "id": f"oom-{k}", "subjects": ["4068097-6"]}]})
                    if res.status_code == 200:
                        self.acked.append(f"oom-{k}")
                else:
                    res = httpx.post(f"{self.url}{API}/suggest-batch", timeout=T, json={
                        "records": [record] * 64}) if kind == "batch" else httpx.post(
                        f"{self.url}{API}/suggest", timeout=T, json=record)
                    if res.status_code == 200:
                        self.answered.append((time.time(), int(res.headers["x-worker"])))
                failed = res.status_code != 200
            except httpx.HTTPError:  # the request the killed worker had
                failed = True
            self.failed += failed


@pytest.fixture(scope="module")
def server(tiny_hybrids, tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    shutil.copytree(tiny_hybrids[0], root / "tiny")
    srv = ServeProcess(str(root / "tiny"), "--workers", "2", "--allow-learn",
                       "--no-compile-ranker", log=root / "log")
    srv.wait_ready("tiny", workers=2)
    yield srv, root / "tiny"
    assert srv.stop() == 0, srv.log()


def test_two_workers_answer_on_one_port(server, tiny_hybrids):
    srv, _ = server
    shown = httpx.get(f"{srv.url}{API}", timeout=T).json()
    pids = {w["pid"] for w in shown["workers"]}
    version = dict(model_version(tiny_hybrids[0]))
    assert len(pids) == 2 and srv.proc.pid not in pids
    assert all({"version": w["version"], "trained_at": w["trained_at"]} == version
               for w in shown["workers"])

    def get():
        res = httpx.get(f"{srv.url}{API}", timeout=T)
        assert int(res.headers["x-worker"]) == res.json()["worker"]
        return res.json()["worker"], res.json()["model_version"]

    answered = until_both(get)
    assert set(answered) == pids
    assert all(v == version for values in answered.values() for v in values)


def test_a_record_learned_through_one_worker_is_used_by_both(server):
    srv, _ = server
    res = httpx.post(f"{srv.url}{API}/learn", json={"records": [LEARNED]}, timeout=T)
    assert res.json() == {"stored": 1, "learned": True}
    learner = int(res.headers["x-worker"])

    def suggest():
        body = {"title": LEARNED["title"], "abstract": LEARNED["abstract"], "limit": 8}
        res = httpx.post(f"{srv.url}{API}/suggest", json=body, timeout=T)
        voted = [n for r in res.json()["results"] if r["id"] == ZUKUNFT
                 for n in r["reasons"].get("neighbours", [])]
        return int(res.headers["x-worker"]), voted

    answered = until_both(suggest)
    assert learner in answered  # and the other worker, which never saw the request:
    for votes in answered.values():
        assert all({"id": "learned-1", "title": LEARNED["title"]} in v for v in votes)


def test_a_reload_through_one_worker_reaches_both(server, tiny_hybrids):
    srv, folder = server
    shown = httpx.get(f"{srv.url}{API}", timeout=T).json()
    new = next(m for m in tiny_hybrids
               if model_version(m)["version"] != shown["model_version"]["version"])
    old = {w["pid"] for w in shown["workers"]}
    swap_in(new, folder)
    res = reload(srv.url).json()
    assert res["status"] == "reloaded" and res["others_asked"] is True
    target = dict(model_version(new))
    assert res["model_version"] == target
    # preloaded, the supervisor then replaces every worker, the one that answered (which
    # reloaded in place) too: wait until both are new, or the next test would kill a
    # worker that is being retired anyway
    deadline = time.time() + 120
    while True:
        workers = httpx.get(f"{srv.url}{API}", timeout=T).json()["workers"]
        if len(workers) == 2 and all(w["version"] == target["version"]
                                     and w["pid"] not in old for w in workers):
            break
        assert time.time() < deadline, srv.log()
        time.sleep(0.1)

    def suggest():
        res = httpx.post(f"{srv.url}{API}/suggest", json=QUERY, timeout=T)
        return int(res.headers["x-worker"]), (
            res.headers["x-model-version"],
            [(r["id"], r["score"]) for r in res.json()["results"]])

    expected = (target["version"], answers(new))
    assert all(v == expected for values in until_both(suggest).values() for v in values)


def test_a_killed_worker_is_replaced_by_one_that_knows_what_was_learned(server):
    srv, _ = server
    record = {**LEARNED, "id": "learned-2", "title": "Zukunft der Pilze"}
    res = httpx.post(f"{srv.url}{API}/learn", json={"records": [record]}, timeout=T)
    assert res.json()["stored"] == 1
    before = {w["pid"] for w in httpx.get(f"{srv.url}{API}", timeout=T).json()["workers"]}
    victim = int(res.headers["x-worker"])  # the one that learned it
    os.kill(victim, signal.SIGKILL)
    deadline = time.time() + 300
    while True:
        now = {w["pid"] for w in httpx.get(f"{srv.url}{API}", timeout=T).json()["workers"]}
        if len(now) == 2 and victim not in now:
            break
        assert time.time() < deadline, srv.log()
        time.sleep(0.2)
    (fresh,) = now - before

    def suggest():
        body = {"title": record["title"], "abstract": record["abstract"], "limit": 8}
        res = httpx.post(f"{srv.url}{API}/suggest", json=body, timeout=T)
        return int(res.headers["x-worker"]), [n["id"] for r in res.json()["results"]
                                              if r["id"] == ZUKUNFT
                                              for n in r["reasons"].get("neighbours", [])]

    answered = until_both(suggest)
    assert fresh in answered  # it replays what was learned since the server started
    assert all("learned-2" in ids for votes in answered.values() for ids in votes)
    assert f"(pid {victim}) was killed by SIGKILL" in " ".join(srv.log().split())


def test_a_worker_killed_for_memory_is_replaced_and_nothing_learned_is_lost(server):
    """Issue 46: one worker under a memory limit of its own (a cgroup) is loaded until the
    kernel's OOM killer ends it. The supervisor starts another in its place, the other
    worker answers throughout, every learn acknowledged is in the feedback store, and the
    log and ``/metrics`` say which worker died of what."""
    srv, folder = server
    victim, survivor = (w["pid"] for w in
                        httpx.get(f"{srv.url}{API}", timeout=T).json()["workers"])
    before = MetricSamples(httpx.get(f"{srv.url}/metrics", timeout=T).text)
    with MemoryGroup(victim, headroom=4 * 2**20) as group, Load(srv.url) as load:
        deadline = time.time() + 120
        while Path(f"/proc/{victim}").exists():
            assert time.time() < deadline and srv.proc.poll() is None, srv.log()
            time.sleep(0.05)
        died = time.time()
        while True:  # replaced, the other one still there
            now = {w["pid"] for w in
                   httpx.get(f"{srv.url}{API}", timeout=T).json()["workers"]}
            if len(now) == 2 and victim not in now:
                break
            assert time.time() < deadline, srv.log()
            time.sleep(0.1)
        while not any(t > died and pid == survivor for t, pid in load.answered):
            assert time.time() < deadline, "the other worker stopped answering"
            time.sleep(0.05)
        oom_kills = group.oom_kills()
    # the kernel's OOM killer, not anybody's kill -9 (only the victim is in the group; on a
    # loaded machine the killer may count a second kill while the first one's memory is
    # still being freed: seen once, so at least one, not exactly one)
    assert oom_kills >= 1
    assert survivor in now
    (fresh,) = now - {survivor}
    line = (rf"worker (\d) \(pid {victim}\) was killed by SIGKILL \(out of memory\?\); "
            rf"started worker \1 again \(pid {fresh}\)")
    assert re.search(line, " ".join(srv.log().split())), srv.log()  # rich wraps lines
    after = MetricSamples(httpx.get(f"{srv.url}/metrics", timeout=T).text)
    restarts = "tagalign_worker_restarts_total"
    assert after(restarts, cause="SIGKILL") == before(restarts, cause="SIGKILL") + 1
    assert load.acked and load.failed <= 3  # at most the requests the killed worker had
    from tagalign.feedback import FeedbackStore

    store = FeedbackStore.for_project(folder)
    try:
        stored = {r.id for r in store.confirmed_records("tiny")}
    finally:
        store.close()
    assert set(load.acked) <= stored, set(load.acked) - stored


def test_sigterm_stops_both_workers_after_the_request_in_flight(tiny_hybrids, tmp_path):
    shutil.copytree(tiny_hybrids[0], tmp_path / "tiny")
    srv = ServeProcess(str(tmp_path / "tiny"), "--workers", "2", "--mmap", "--allow-learn",
                       "--no-compile-ranker", log=tmp_path / "log")
    try:
        shown = srv.wait_ready("tiny", workers=2)
        pids = [w["pid"] for w in shown["workers"]]
        assert shown["read_only"] is True  # mapped: learning refused with a reason
        learn = httpx.post(f"{srv.url}{API}/learn", json={"records": [LEARNED]}, timeout=T)
        assert learn.status_code == 409 and "--mmap" in learn.json()["detail"]
        held = HeldRequest(srv.port, f"{API}/suggest", QUERY)
        srv.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 60
        while not refused(srv.port):
            assert time.time() < deadline, srv.log()
            time.sleep(0.05)
        status, _, body = held.finish()
        assert status == 200
        assert [(r["id"], r["score"]) for r in httpx.Response(200, content=body)
                .json()["results"]] == answers(tiny_hybrids[0])
        assert srv.proc.wait(60) == 0, srv.log()
        for pid in pids:  # the supervisor waited for its workers
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        assert "Traceback" not in srv.log()
    finally:
        srv.stop()


@pytest.mark.parametrize("preload", [True, False])
def test_a_model_that_cannot_load_stops_the_server(tiny_hybrids, tmp_path, preload):
    """Preloaded (the default), the supervisor's load fails before any worker starts;
    with --no-preload the first worker's does, and that stops the supervisor."""
    shutil.copytree(tiny_hybrids[0], tmp_path / "tiny")
    # checked before any worker starts: the folder is a trained project
    (tmp_path / "tiny" / "model" / "ranker").rename(tmp_path / "ranker")
    res = subprocess.run([sys.executable, "-m", "tagalign.cli.main", "serve",
                          str(tmp_path / "tiny"), "--workers", "2", "--port", str(free_port()),
                          *([] if preload else ["--no-preload"])],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    assert "error:" in res.stderr and "retrain" in res.stderr  # the model is incomplete
    assert ("a worker failed to start" in res.stderr) is not preload
    assert "Traceback" not in res.stderr


def test_the_workers_socket_sends_small_answers_at_once():
    """The listening socket the workers share is declared TCP, so asyncio turns Nagle's
    algorithm off on every connection it accepts (as for a socket a single server binds
    itself); uvicorn's own left it on, and each answer waited 40 ms for a delayed ACK."""
    import asyncio
    import socket

    from uvicorn import Config

    from tagalign.serve.sockets import tcp_socket

    sock = tcp_socket(Config("x:y", host="127.0.0.1", port=free_port()))
    nodelay: list[int] = []

    async def main() -> None:
        accepted = asyncio.Event()

        def connected(_reader, writer) -> None:
            raw = writer.get_extra_info("socket")
            nodelay.append(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            accepted.set()

        server = await asyncio.start_server(connected, sock=sock)
        _, writer = await asyncio.open_connection(*sock.getsockname())
        await asyncio.wait_for(accepted.wait(), 30)
        writer.close()
        server.close()

    asyncio.run(main())
    assert nodelay == [1]


def test_each_worker_has_a_socket_of_its_own_on_one_port():
    """`worker_sockets`: N listening sockets on one port (SO_REUSEPORT), each handed
    connections by the kernel, every one declared TCP (Nagle off); a port another server
    holds is refused as without SO_REUSEPORT."""
    import socket

    from uvicorn import Config

    from tagalign.serve.sockets import worker_sockets

    port = free_port()
    config = Config("x:y", host="127.0.0.1", port=port)
    socks = worker_sockets(config, 2)
    try:
        assert len(socks) == 2
        assert {s.getsockname() for s in socks} == {("127.0.0.1", port)}
        assert all(s.proto == socket.IPPROTO_TCP for s in socks)
        for s in socks:
            s.listen(64)
            s.setblocking(False)
        got = [0, 0]
        clients = []
        for _ in range(64):  # 64 connections from distinct ports: both sockets get some
            clients.append(socket.create_connection(("127.0.0.1", port)))
        deadline = time.time() + 30
        while sum(got) < 64 and time.time() < deadline:
            for i, s in enumerate(socks):
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    continue
                conn.close()
                got[i] += 1
        assert sum(got) == 64 and min(got) > 0, got
        for c in clients:
            c.close()
    finally:
        for s in socks:
            s.close()
    held = socket.create_server(("127.0.0.1", port))  # another server, no SO_REUSEPORT
    try:
        with pytest.raises(SystemExit):
            worker_sockets(config, 2)
    finally:
        held.close()


def test_a_dead_workers_cause_is_named_for_the_log_and_the_metric():
    from tagalign.serve.worker_process import WorkerDeath

    oom = WorkerDeath(2, 4711, -signal.SIGKILL)
    assert (oom.cause, oom.describe()) == (
        "SIGKILL", "worker 2 (pid 4711) was killed by SIGKILL (out of memory?)")
    segv = WorkerDeath(1, 12, -signal.SIGSEGV)
    assert (segv.cause, segv.describe()) == ("SIGSEGV", "worker 1 (pid 12) was killed by SIGSEGV")
    assert WorkerDeath(1, 12, 3).describe() == "worker 1 (pid 12) exited with status 3"
    hung = WorkerDeath(1, 12, -signal.SIGKILL, hung=True)
    assert hung.cause == "unresponsive" and "did not answer" in hung.describe()
