"""Several worker processes behind one port (``tagalign serve --workers N``).

uvicorn's own supervisor (`uvicorn.supervisors.Multiprocess`) does most of it: it binds the
socket once, spawns N processes that each build the app from an import string and serve
on the shared socket (the kernel hands each new connection to one of them), pings them and
replaces one that dies or hangs. Spawned, not forked: each worker loads its own models
after it starts, so no thread pool, faiss or LightGBM state is copied half-alive into a
child; with ``--mmap`` the workers map the same files and share their pages through the
page cache. What `Supervisor` changes:

- **SIGHUP reloads models, not processes.** uvicorn answers SIGHUP by starting fresh
  workers and stopping the old ones; here the supervisor passes SIGHUP on to every worker,
  and each reloads what changed in its own process (`tagalign.serve.reload`): the model
  is swapped while the worker serves, no connection is refused and no worker starts
  cold. A worker that reloaded through ``POST …/reload`` sends the supervisor SIGHUP to
  reach its siblings the same way (`tagalign.serve.workers`).
- **SIGTERM stops gracefully, then exit 0.** The supervisor closes its copy of the
  listening socket (new connections are refused once the workers close theirs), sends
  each worker SIGTERM, and waits: each finishes its requests in flight (uvicorn's
  ``timeout_graceful_shutdown``), closes its feedback stores and exits 0. A worker still
  running well after that is killed.
- **Workers are observed.** Before they start, the supervisor makes a private temporary
  folder: ``workers/`` for their state files, and ``prometheus/`` set as
  ``PROMETHEUS_MULTIPROC_DIR`` (unless it is set already), so metrics of all workers can
  be added up; `events.worker_exited` is called for every worker that ends. A worker that
  fails to start (its app factory exits with uvicorn's ``STARTUP_FAILURE``) stops the
  server: the error would repeat on every restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from uvicorn import Config, Server
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from tagalign.serve import events
from tagalign.serve.workers import remove_state

log = logging.getLogger(__name__)

#: the variable prometheus_client reads to add up the metrics of several processes
PROMETHEUS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: a worker that has not stopped this long after its graceful timeout is killed
KILL_GRACE = 10.0
#: seconds between closing the listening socket and closing kept-alive connections
DRAIN = 0.5


class DrainingServer(Server):
    """uvicorn's server with a pause in its graceful stop: after it stops accepting, it
    waits `DRAIN` seconds before it closes the connections that look idle. A kept-alive
    connection between two requests looks idle, yet its client may have sent the next
    request already (in the socket's buffer, not read yet): uvicorn would close it unread
    and the client gets a reset for a request it sent before the stop (measured: 4 of 16
    in flight on the full-train project with 2 workers). In the pause such a request is
    read, and answered before the connection closes."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # uvicorn's shutdown closes them again: idempotent
        for sock in sockets or []:
            sock.close()
        await asyncio.sleep(DRAIN)
        await super().shutdown(sockets)


class Hangup:
    """SIGHUP → reload, in a worker or a single server process. A SIGHUP that arrives
    before the app exists (while its models load) is remembered and acted on when the app
    attaches its action: the default action of SIGHUP would end the process."""

    def __init__(self) -> None:
        self.action: Callable[[], object] | None = None
        self.pending = False

    def install(self) -> None:
        signal.signal(signal.SIGHUP, self._handle)

    def attach(self, action: Callable[[], object]) -> None:
        self.action = action
        if self.pending:
            self.pending = False
            action()

    def _handle(self, _sig: int, _frame: FrameType | None) -> None:
        if self.action is None:
            self.pending = True
        else:
            self.action()


#: this process's SIGHUP handling (one per process: signals are)
HANGUP = Hangup()


def exit_quietly(_sig: int, _frame: FrameType | None) -> None:
    """SIGTERM's (and SIGINT's) handler outside uvicorn's own: uvicorn handles the signal
    while it serves, and raises it again once it has stopped gracefully; then this makes
    the process exit 0 (the default action would end it by the signal)."""
    raise SystemExit(0)


class WorkerProcess(Process):
    """A uvicorn worker that exits 0 after a graceful stop and reloads on SIGHUP, and is
    never waited for while it starts.

    uvicorn pings a worker through a pipe and waits for the answer (up to
    ``timeout_worker_healthcheck``); a worker answers from a thread it starts only after
    its imports. Waiting on one that is still importing holds up the supervisor's loop —
    a SIGTERM, a worker that failed — for the whole timeout; so until a worker has
    answered once, it is asked once and not waited for (it counts as alive while its
    process lives)."""

    answered = False
    _asked = False

    @property
    def server(self) -> Server:
        if self._server is None:
            self._server = DrainingServer(config=self.config)
        return self._server

    def is_alive(self, timeout: float = 5) -> bool:
        if not self.process.is_alive():
            return False
        if self.answered:
            return super().is_alive(timeout)
        try:
            if not self._asked:
                self.parent_conn.send(b"ping")
                self._asked = True
            if self.parent_conn.poll(0):
                self.parent_conn.recv()
                self.answered = True
        except (OSError, EOFError):
            return False
        return True

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover
        # runs in the spawned worker (covered by the subprocess tests)
        signal.signal(signal.SIGTERM, exit_quietly)
        signal.signal(signal.SIGINT, exit_quietly)
        HANGUP.install()
        super().target(sockets)


class Supervisor(Multiprocess):
    """uvicorn's supervisor with the changes of the module docstring; ``state_dir``: the
    workers' state files (a worker's is deleted when it ends)."""

    def __init__(self, config: Config, sockets: list[socket.socket], state_dir: Path):
        super().__init__(config, sockets)
        self.state_dir = state_dir
        self.failed = False

    def _spawn(self) -> WorkerProcess:
        process = WorkerProcess(self.config, self.sockets)
        process.start()
        # the worker has its end of the ping pipe now; with the supervisor's copy closed,
        # a worker that dies ends the pipe and a ping sees it at once, instead of waiting
        # out the healthcheck timeout for an answer that cannot come
        process.child_conn.close()
        return process

    def init_processes(self) -> None:
        self.processes = [self._spawn() for _ in range(self.processes_num)]
        log.info("started %d workers: %s", len(self.processes),
                 ", ".join(str(p.pid) for p in self.processes))

    def handle_hup(self) -> None:
        log.info("SIGHUP: every worker reloads the models whose folders changed")
        for process in self.processes:
            if process.process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGHUP)

    def handle_ttin(self) -> None:
        self.processes_num += 1
        self.processes.append(self._spawn())
        log.info("SIGTTIN: %d workers", self.processes_num)

    def handle_ttou(self) -> None:
        if self.processes_num <= 1:
            return
        self.processes_num -= 1
        process = self.processes.pop()
        process.terminate()
        process.join()
        self._ended(process)
        log.info("SIGTTOU: %d workers", self.processes_num)

    def _ended(self, process: Process) -> None:
        if process.pid is not None:
            remove_state(self.state_dir, process.pid)
            events.worker_exited(process.pid)

    def keep_subprocess_alive(self) -> None:
        # uvicorn's, with the worker's end observed and a startup failure remembered
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()  # hung (it did not answer the ping), or gone already
            process.join()
            self._ended(process)
            if process.exitcode == STARTUP_FAILURE:
                log.error("worker %s failed to start (its error is above); stopping",
                          process.pid)
                self.failed = True
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.warning("worker %s ended (exit code %s); starting another", process.pid,
                        process.exitcode)
            self.processes[idx] = self._spawn()

    def terminate_all(self) -> None:
        for sock in self.sockets:  # refuse new connections once the workers close theirs
            sock.close()
        super().terminate_all()

    def join_all(self) -> None:
        deadline = time.monotonic() + (self.config.timeout_graceful_shutdown or 0) + KILL_GRACE
        for process in self.processes:
            process.process.join(max(0.0, deadline - time.monotonic()))
            if process.process.is_alive():
                log.error("worker %s did not stop in time; killing it", process.pid)
                process.kill()
                process.process.join()
            self._ended(process)


def tcp_socket(config: Config) -> socket.socket:
    """uvicorn's listening socket, marked as TCP. uvicorn makes it with protocol 0, which
    asyncio takes for "not TCP" and then leaves Nagle's algorithm on for every accepted
    connection: a response written in two parts (head, body) then waits for the client's
    delayed ACK, 40 ms a request (measured: 54 ms median per suggest against 4 ms from one
    process). The same socket, declared TCP, gets TCP_NODELAY as one process's does."""
    bound = config.bind_socket()
    if bound.family not in (socket.AF_INET, socket.AF_INET6):
        return bound  # a Unix socket: no Nagle
    sock = socket.socket(bound.family, bound.type, socket.IPPROTO_TCP, fileno=bound.detach())
    sock.set_inheritable(True)
    return sock


def run_workers(config: Config, prepare: Callable[[Path], None]) -> int:
    """Serve ``config.workers`` workers of ``config.app`` (an import string) until SIGTERM
    or SIGINT; ``prepare(state_dir)`` runs before they start (it sets what they read, such
    as the environment). Returns the exit status: 0, or 1 when a worker failed to start."""
    root = Path(tempfile.mkdtemp(prefix="tagalign-serve-"))
    try:
        state_dir = root / "workers"
        state_dir.mkdir()
        if not os.environ.get(PROMETHEUS_DIR_ENV):
            metrics_dir = root / "prometheus"
            metrics_dir.mkdir()
            os.environ[PROMETHEUS_DIR_ENV] = str(metrics_dir)
        events.multiprocess_dir(Path(os.environ[PROMETHEUS_DIR_ENV]))
        prepare(state_dir)
        supervisor = Supervisor(config, [tcp_socket(config)], state_dir)
        supervisor.run()
        return 1 if supervisor.failed else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["DRAIN", "HANGUP", "KILL_GRACE", "PROMETHEUS_DIR_ENV", "DrainingServer", "Hangup",
           "Supervisor", "WorkerProcess", "exit_quietly", "run_workers", "tcp_socket"]
