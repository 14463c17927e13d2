"""Several worker processes behind one port (``tagalign serve --workers N``).

uvicorn's own supervisor (`uvicorn.supervisors.Multiprocess`) does most of it: it starts N
processes that each build the app from an import string, pings them and replaces one that
dies or hangs. What `Supervisor` changes:

- **Preloaded, forked workers** (the default; ``--no-preload`` spawns them as uvicorn
  does, each loading its own models). The supervisor loads the models once
  (`tagalign.serve.factory.preload`, into `ServingProcess.preloaded`) and forks the
  workers from itself: they share its memory, a page being copied only when a worker
  writes to it (measured on the full-train hybrid: two workers and the supervisor take
  1.1× one worker's memory, against 1.9× for workers that each load their own). Forked
  before any model ran, so no thread pool is copied half-alive into a worker.
- **A socket per worker.** Each worker accepts on a socket of its own, all bound to the
  port with ``SO_REUSEPORT`` (`worker_sockets`: why).
- **SIGHUP swaps models, not processes at once.** Preloaded, the supervisor reloads the
  models whose folders changed and replaces the workers one at a time with workers forked
  from the new copy (`tagalign.serve.rollover`). Spawned, it passes SIGHUP on to every
  worker, and each reloads what changed in its own process (`tagalign.serve.reload`).
  Either way no connection is refused and no request fails. A worker that reloaded through
  ``POST …/reload`` sends the supervisor SIGHUP to reach its siblings the same way
  (`tagalign.serve.workers`).
- **SIGTERM stops gracefully, then exit 0.** The supervisor closes its copies of the
  listening sockets (new connections are refused once the workers close theirs), sends
  each worker SIGTERM, and waits: each finishes its requests in flight (uvicorn's
  ``timeout_graceful_shutdown``, `DrainingServer`), closes its feedback stores and exits
  0. A worker still running well after that is killed.
- **Workers are observed.** Before they start, the supervisor makes a private temporary
  folder: ``workers/`` for their state files, and ``prometheus/`` set as
  ``PROMETHEUS_MULTIPROC_DIR`` (unless it is set already), so metrics of all workers can
  be added up; ``on_worker_exited`` is called for every worker that ends. A worker that
  fails to start (its app factory exits with uvicorn's ``STARTUP_FAILURE``) stops the
  server: the error would repeat on every restart.
- **A worker that dies is replaced, and the log says why.** Killed by a signal (SIGKILL
  is what the kernel's OOM killer sends when a memory limit is reached), exited, or hung
  (no answer to the pings: the supervisor kills it): one line names the worker, its pid,
  the cause and the pid of the worker started in its place (`WorkerDeath`), and
  ``on_worker_died`` counts it (``tagalign_worker_restarts_total{cause}`` in
  ``/metrics``). The other workers serve on meanwhile.

What a serving process holds beyond its app — its SIGHUP handling, whether it is stopping,
the models a supervisor preloaded for the workers it forks — is one object,
`ServingProcess` (`PROCESS`: signals and a fork's memory are the process's); nothing else
in `tagalign.serve` is global.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TypeVar

from uvicorn import Config, Server
from uvicorn._subprocess import subprocess_started
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import SIGNALS, Multiprocess, Process

from tagalign.project import Project, model_version
from tagalign.serve.rollover import Rollover
from tagalign.serve.workers import remove_state

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the variable prometheus_client reads to add up the metrics of several processes
PROMETHEUS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: how a worker starts with ``fork``: a copy of the supervisor, sharing its pages
FORK = multiprocessing.get_context("fork")
#: a worker that has not stopped this long after its graceful timeout is killed
KILL_GRACE = 10.0
#: a worker forked to replace one in a model swap that does not serve this long is given up
READY_TIMEOUT = 300.0
#: a worker whose ping failed is given this long to end before it counts as hung
DYING = 2.0
#: at most this many seconds between closing the listening socket and closing the
#: kept-alive connections still open
DRAIN = 1.0


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


class ServingProcess:
    """What one serving process holds beyond its app, in one place.

    ``hangup``: its SIGHUP handling (`Hangup`); ``stopping``: set once it stops serving
    (`DrainingServer`), so every answer from then on says ``Connection: close``
    (`tagalign.serve.app.WorkerHeader`) and a client does not send its next request on a
    kept-alive connection the process is about to close; ``preloaded``: the projects a
    supervisor loaded before it forked its workers (`tagalign.serve.factory.preload`),
    which every worker then serves — their memory is the supervisor's, shared by all (a
    page is copied only when a worker writes to it)."""

    def __init__(self) -> None:
        self.hangup = Hangup()
        self.stopping = threading.Event()
        self.preloaded: dict[str, Project] = {}

    def stale(self) -> list[str]:
        """The preloaded projects whose folders hold another model now."""
        return [pid for pid, proj in self.preloaded.items()
                if proj.model_version != model_version(proj.path)]


#: this process's (one per process: signals and a forked worker's memory are)
PROCESS = ServingProcess()


class DrainingServer(Server):
    """uvicorn's server with a pause in its graceful stop. Once it stops accepting, every
    answer says ``Connection: close`` (``stopping``, `ServingProcess`: a client that keeps
    its connection alive sends its next request elsewhere), and it waits until its clients
    have closed their connections, at most `DRAIN` seconds, before it closes those that
    look idle. A kept-alive connection between two requests looks idle, yet its client may
    have sent the next request already (in the socket's buffer, not read yet): uvicorn
    would close it unread and the client gets a reset for a request it sent before the
    stop (measured: 4 of 16 in flight on the full-train project with 2 workers; and, while
    workers were replaced one at a time under load, 1 request of a few hundred). In the
    pause such a request is read and answered, with ``Connection: close``."""

    def __init__(self, config: Config, stopping: threading.Event):
        super().__init__(config)
        self.stopping = stopping

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.clear()  # an earlier server of this process (tests) may have stopped
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        for server in self.servers:
            server.close()  # uvicorn's shutdown closes them again: idempotent
        for sock in sockets or []:
            sock.close()
        deadline = time.monotonic() + DRAIN
        while self.server_state.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await super().shutdown(sockets)


def exit_quietly(_sig: int, _frame: FrameType | None) -> None:
    """SIGTERM's (and SIGINT's) handler outside uvicorn's own: uvicorn handles the signal
    while it serves, and raises it again once it has stopped gracefully; then this makes
    the process exit 0 (the default action would end it by the signal)."""
    raise SystemExit(0)


@dataclass(frozen=True)
class WorkerDeath:
    """A worker that ended without being asked to: its ``slot`` (1 for the first worker),
    ``pid``, ``exitcode`` (negative: the signal that killed it, as `multiprocessing` has
    it) and whether it was ``hung`` (alive, but not answering the supervisor's pings: the
    supervisor killed it)."""

    slot: int
    pid: int | None
    exitcode: int | None
    hung: bool = False

    @property
    def cause(self) -> str:
        """A short name of the cause, from a small fixed set (a metric's label):
        ``unresponsive``, a signal's name (``SIGKILL``), or ``exit N``."""
        if self.hung:
            return "unresponsive"
        if self.exitcode is not None and self.exitcode < 0:
            try:
                return signal.Signals(-self.exitcode).name
            except ValueError:
                return f"signal {-self.exitcode}"
        return f"exit {self.exitcode}"

    def describe(self) -> str:
        """What happened, for the log: ``worker 1 (pid 123) was killed by SIGKILL (out of
        memory?)``."""
        who = f"worker {self.slot} (pid {self.pid})"
        if self.hung:
            return f"{who} did not answer the supervisor's pings and was killed"
        if self.exitcode is not None and self.exitcode < 0:
            # a SIGKILL nobody here sent: the kernel's OOM killer (a container's or a
            # cgroup's memory limit), or an operator's kill -9
            hint = " (out of memory?)" if self.cause == "SIGKILL" else ""
            return f"{who} was killed by {self.cause}{hint}"
        return f"{who} exited with status {self.exitcode}"


class WorkerProcess(Process):
    """A uvicorn worker that exits 0 after a graceful stop and reloads on SIGHUP, and is
    never waited for while it starts.

    uvicorn pings a worker through a pipe and waits for the answer (up to
    ``timeout_worker_healthcheck``); a worker answers from a thread it starts only after
    its imports. Waiting on one that is still importing holds up the supervisor's loop —
    a SIGTERM, a worker that failed — for the whole timeout; so until a worker has
    answered once, it is asked once and not waited for (it counts as alive while its
    process lives)."""

    answered = False  # it has answered a ping
    started = False  # its last answer said its server serves
    _asked = False

    def __init__(self, config: Config, sockets: list[socket.socket], fork: bool = False,
                 close: list[socket.socket] | None = None):
        super().__init__(config, sockets)
        self.close_in_worker = close or []
        if fork:  # uvicorn spawns; forked, the worker starts with the supervisor's memory
            # uvicorn declares its worker a SpawnProcess; a forked one is the same to it
            self.process = FORK.Process(target=subprocess_started, kwargs={  # type: ignore[assignment]
                "config": config, "target": self.target, "sockets": sockets,
                "stdin_fileno": None})

    @property
    def server(self) -> Server:
        # built in the worker (a spawned worker gets this object pickled, without it)
        if self._server is None:
            self._server = DrainingServer(self.config, PROCESS.stopping)
        return self._server

    def is_alive(self, timeout: float = 5) -> bool:
        if not self.process.is_alive():
            return False
        if self.answered:
            return super().is_alive(timeout)
        try:
            self._ask()
        except (OSError, EOFError):
            return False
        return True

    def serving(self) -> bool:
        """Whether its server serves, asked without waiting (a model swap's new worker)."""
        try:
            self._ask()
        except (OSError, EOFError):
            return False
        return self.started

    def _ask(self) -> None:
        """A ping sent once, its answer read when there is one, never waited for."""
        if not self._asked:
            self.parent_conn.send(b"ping")
            self._asked = True
        if self.parent_conn.poll(0):
            self._asked = False
            self.answered, self.started = True, bool(self.parent_conn.recv())

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover
        # runs in the spawned worker (covered by the subprocess tests)
        for sock in self.close_in_worker:
            sock.close()
        for sig in set(SIGNALS) - {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}:
            signal.signal(sig, signal.SIG_DFL)  # forked, it had the supervisor's handlers
        signal.signal(signal.SIGTERM, exit_quietly)
        signal.signal(signal.SIGINT, exit_quietly)
        PROCESS.hangup.install()
        super().target(sockets)


class Supervisor(Multiprocess):
    """uvicorn's supervisor with the changes of the module docstring; ``state_dir``: the
    workers' state files (a worker's is deleted when it ends); ``on_worker_exited(pid)``:
    called for every worker that ended (its metrics are forgotten there);
    ``on_worker_died(death)``: for every worker that ended unasked and was replaced."""

    def __init__(self, config: Config, sockets: list[socket.socket], state_dir: Path,
                 fork: bool = False, refresh: Callable[[], bool] | None = None,
                 on_worker_exited: Callable[[int], object] | None = None,
                 on_worker_died: Callable[[WorkerDeath], object] | None = None):
        super().__init__(config, sockets)
        self.state_dir = state_dir
        self.fork = fork
        self.on_worker_exited = on_worker_exited
        self.on_worker_died = on_worker_died
        self.failed = False
        # preloaded workers swap models by being replaced (`tagalign.serve.rollover`)
        self.rollover = None if refresh is None else Rollover(
            refresh, self._spawn, WorkerProcess.serving, self._retire, ready_timeout=READY_TIMEOUT)
        self.retiring: list[tuple[WorkerProcess, float]] = []

    def _socket(self, slot: int) -> list[socket.socket]:
        """The socket of worker ``slot``: its own, or the one all share."""
        return [self.sockets[slot if len(self.sockets) > 1 else 0]]

    def _spawn(self, slot: int) -> WorkerProcess:
        own = self._socket(slot)
        # forked, a worker inherits every socket the supervisor has: it closes the others'
        # (a socket that stays open in a worker that does not accept on it would keep the
        # connections the kernel hands it waiting, once its own worker is gone)
        others = [s for s in self.sockets if s not in own] if self.fork else []
        process = WorkerProcess(self.config, own, fork=self.fork, close=others)
        process.start()
        # the worker has its end of the ping pipe now; with the supervisor's copy closed,
        # a worker that dies ends the pipe and a ping sees it at once, instead of waiting
        # out the healthcheck timeout for an answer that cannot come
        process.child_conn.close()
        return process

    def init_processes(self) -> None:
        self.processes = [self._spawn(slot) for slot in range(self.processes_num)]
        log.info("started %d workers: %s", len(self.processes),
                 ", ".join(str(p.pid) for p in self.processes))

    def handle_hup(self) -> None:
        if self.rollover is not None:
            log.info("SIGHUP: loading the models whose folders changed, then replacing the "
                     "workers one at a time")
            self.rollover.request()
            return
        log.info("SIGHUP: every worker reloads the models whose folders changed")
        for process in self.processes:
            if process.process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGHUP)

    def handle_ttin(self) -> None:
        self.processes_num += 1
        if len(self.sockets) > 1:  # a socket of its own, in the same group
            first = self.sockets[0]
            self.sockets.append(reuseport_socket(first.family, first.getsockname()[:2]))
        self.processes.append(self._spawn(self.processes_num - 1))
        log.info("SIGTTIN: %d workers", self.processes_num)

    def handle_ttou(self) -> None:
        if self.processes_num <= 1:
            return
        self.processes_num -= 1
        process = self.processes.pop()
        process.terminate()
        process.join()
        self._ended(process)
        if len(self.sockets) > self.processes_num:  # nobody accepts on it any more
            self.sockets.pop().close()
        log.info("SIGTTOU: %d workers", self.processes_num)

    def _ended(self, process: Process) -> None:
        if process.pid is not None:
            remove_state(self.state_dir, process.pid)
            _notify(self.on_worker_exited, process.pid)

    def _retire(self, process: WorkerProcess) -> None:
        """Stop ``process`` gracefully; `_reap` collects it."""
        process.terminate()
        deadline = time.monotonic() + (self.config.timeout_graceful_shutdown or 0) + KILL_GRACE
        self.retiring.append((process, deadline))

    def _reap(self) -> None:
        for process, deadline in list(self.retiring):
            if process.process.is_alive():
                if time.monotonic() < deadline:
                    continue
                log.error("worker %s did not stop in time; killing it", process.pid)
                process.kill()
            process.process.join()
            self._ended(process)
            self.retiring.remove((process, deadline))

    def keep_subprocess_alive(self) -> None:
        self._keep_alive()
        if self.should_exit.is_set():
            return
        if self.rollover is not None:
            self.rollover.step(self.processes)
        self._reap()

    def _keep_alive(self) -> None:
        # uvicorn's, with the worker's end observed and a startup failure remembered
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            # a worker killed just now closes its end of the ping pipe before it is gone
            # (measured: an OOM-killed worker of the full model was still exiting): given
            # a moment to end, only one still running did not answer, and is killed here
            process.process.join(DYING)
            hung = process.process.is_alive()
            process.kill()
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
            death = WorkerDeath(idx + 1, process.pid, process.exitcode, hung)
            self.processes[idx] = self._spawn(idx)
            log.warning("%s; started worker %d again (pid %s)", death.describe(), idx + 1,
                        self.processes[idx].pid)
            _notify(self.on_worker_died, death)

    def terminate_all(self) -> None:
        for sock in self.sockets:  # refuse new connections once the workers close theirs
            sock.close()
        if self.rollover is not None:  # a new worker not serving yet stops with the others
            self.processes.extend(self.rollover.pending())
        super().terminate_all()

    def join_all(self) -> None:
        deadline = time.monotonic() + (self.config.timeout_graceful_shutdown or 0) + KILL_GRACE
        self.processes.extend(process for process, _ in self.retiring)
        self.retiring.clear()
        for process in self.processes:
            process.process.join(max(0.0, deadline - time.monotonic()))
            if process.process.is_alive():
                log.error("worker %s did not stop in time; killing it", process.pid)
                process.kill()
                process.process.join()
            self._ended(process)


def _notify(callback: Callable[[T], object] | None, what: T) -> None:
    """``callback(what)``, if any; an observer's bug must not stop the supervisor."""
    if callback is None:
        return
    try:
        callback(what)
    except Exception:
        log.exception("%s(%s) failed", getattr(callback, "__name__", "callback"), what)


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


def worker_sockets(config: Config, n: int) -> list[socket.socket]:
    """``n`` TCP sockets bound to the same host and port with ``SO_REUSEPORT``, one per
    worker (a Unix socket or a system without it: one socket all workers share).

    Why not one shared socket: a kept-alive connection stays with the worker that accepted
    it, and asyncio accepts every pending connection at once when it wakes; so the worker
    that wakes first took all 16 clients of a load test (measured: 0.00 + 1.18 cores busy,
    0.92× one worker's throughput). With a socket each, the kernel hands every new
    connection to one of them by a hash of its addresses, evenly spread. The supervisor
    keeps each worker's socket open: connections waiting in it are accepted by the worker
    that replaces one that died. A probe bound first without ``SO_REUSEPORT`` makes a port
    another server holds fail as it would without it."""
    first = tcp_socket(config)
    if n == 1 or first.family not in (socket.AF_INET, socket.AF_INET6) \
            or not hasattr(socket, "SO_REUSEPORT"):
        return [first]
    address = first.getsockname()[:2]
    first.close()
    out = []
    try:
        for _ in range(n):
            out.append(reuseport_socket(first.family, address))
    except OSError as exc:
        for sock in out:
            sock.close()
        log.error("could not bind %s:%s: %s", address[0], address[1], exc)
        raise SystemExit(1) from exc
    return out


def reuseport_socket(family: socket.AddressFamily, address: tuple) -> socket.socket:
    """A TCP socket bound to ``address`` with ``SO_REUSEPORT`` (inheritable: a worker's)."""
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.set_inheritable(True)
    return sock


def run_workers(config: Config, prepare: Callable[[Path], None], fork: bool = False,
                refresh: Callable[[], bool] | None = None,
                on_metrics_dir: Callable[[Path], object] | None = None,
                on_worker_exited: Callable[[int], object] | None = None,
                on_worker_died: Callable[[WorkerDeath], object] | None = None) -> int:
    """Serve ``config.workers`` workers of ``config.app`` (an import string) until SIGTERM
    or SIGINT; ``prepare(state_dir)`` runs before they start (it sets what they read, such
    as the environment); ``fork``: fork the workers from this process (they start with
    what it loaded) instead of spawning them; ``refresh``: with ``fork``, SIGHUP calls it
    (in a thread) to reload what changed in this process and, when it returns True,
    replaces the workers with new ones forked from it (`tagalign.serve.rollover`).
    ``on_metrics_dir(path)``: called with the folder set as ``PROMETHEUS_MULTIPROC_DIR``
    before the workers start; ``on_worker_exited(pid)``: for every worker that ended;
    ``on_worker_died(death)``: for every worker that ended unasked (`WorkerDeath`), once
    another was started in its place. Returns the exit status: 0, or 1 when a worker
    failed to start."""
    root = Path(tempfile.mkdtemp(prefix="tagalign-serve-"))
    try:
        state_dir = root / "workers"
        state_dir.mkdir()
        if not os.environ.get(PROMETHEUS_DIR_ENV):
            metrics_dir = root / "prometheus"
            metrics_dir.mkdir()
            os.environ[PROMETHEUS_DIR_ENV] = str(metrics_dir)
        if on_metrics_dir is not None:
            on_metrics_dir(Path(os.environ[PROMETHEUS_DIR_ENV]))
        prepare(state_dir)
        supervisor = Supervisor(config, worker_sockets(config, config.workers), state_dir,
                                fork=fork, refresh=refresh if fork else None,
                                on_worker_exited=on_worker_exited,
                                on_worker_died=on_worker_died)
        supervisor.run()
        return 1 if supervisor.failed else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["DRAIN", "KILL_GRACE", "PROCESS", "PROMETHEUS_DIR_ENV", "DrainingServer", "Hangup",
           "ServingProcess", "Supervisor", "WorkerDeath", "WorkerProcess", "exit_quietly",
           "reuseport_socket", "run_workers", "tcp_socket", "worker_sockets"]
