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
  port with ``SO_REUSEPORT`` (`tagalign.serve.sockets.worker_sockets`: why).
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
  ``timeout_graceful_shutdown``, `tagalign.serve.process.DrainingServer`), closes its
  feedback stores and exits 0. A worker still running well after that is killed.
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

Here the supervisor itself (`Supervisor`, `run_workers`); one worker as it sees one
(`WorkerProcess`, `WorkerDeath`) is `tagalign.serve.worker_process`, the sockets
`tagalign.serve.sockets`, what every serving process holds beyond its app (`ServingProcess`,
its SIGHUP handling and graceful stop) `tagalign.serve.process`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVarTuple

from uvicorn import Config
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from tagalign.serve.rollover import Rollover
from tagalign.serve.sockets import reuseport_socket, worker_sockets
from tagalign.serve.worker_process import WorkerDeath, WorkerProcess
from tagalign.serve.workers import remove_state

log = logging.getLogger(__name__)
Ts = TypeVarTuple("Ts")

#: the variable prometheus_client reads to add up the metrics of several processes
PROMETHEUS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: a worker that has not stopped this long after its graceful timeout is killed
KILL_GRACE = 10.0
#: a worker forked to replace one in a model swap that does not serve this long is given up
READY_TIMEOUT = 300.0
#: a worker whose ping failed is given this long to end before it counts as hung
DYING = 2.0


class Supervisor(Multiprocess):
    """uvicorn's supervisor with the changes of the module docstring; ``state_dir``: the
    workers' state files (a worker's is deleted when it ends); ``on_worker_exited(pid)``:
    called for every worker that ended (its metrics are forgotten there);
    ``on_worker_died(death)``: for every worker that ended unasked and was replaced;
    ``on_hup()``: on every SIGHUP, before the reload."""

    def __init__(self, config: Config, sockets: list[socket.socket], state_dir: Path,
                 fork: bool = False, refresh: Callable[[], bool] | None = None,
                 on_worker_exited: Callable[[int], object] | None = None,
                 on_worker_died: Callable[[WorkerDeath], object] | None = None,
                 on_hup: Callable[[], object] | None = None):
        super().__init__(config, sockets)
        self.on_hup = on_hup
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
        _notify(self.on_hup)
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


def _notify(callback: Callable[[*Ts], object] | None, *what: *Ts) -> None:
    """``callback(*what)``, if any; an observer's bug must not stop the supervisor."""
    if callback is None:
        return
    try:
        callback(*what)
    except Exception:
        log.exception("%s(%s) failed", getattr(callback, "__name__", "callback"),
                      ", ".join(map(str, what)))


def run_workers(config: Config, prepare: Callable[[Path], None], fork: bool = False,
                refresh: Callable[[], bool] | None = None,
                on_metrics_dir: Callable[[Path], object] | None = None,
                on_worker_exited: Callable[[int], object] | None = None,
                on_worker_died: Callable[[WorkerDeath], object] | None = None,
                on_hup: Callable[[], object] | None = None) -> int:
    """Serve ``config.workers`` workers of ``config.app`` (an import string) until SIGTERM
    or SIGINT; ``prepare(state_dir)`` runs before they start (it sets what they read, such
    as the environment); ``fork``: fork the workers from this process (they start with
    what it loaded) instead of spawning them; ``refresh``: with ``fork``, SIGHUP calls it
    (in a thread) to reload what changed in this process and, when it returns True,
    replaces the workers with new ones forked from it (`tagalign.serve.rollover`).
    ``on_metrics_dir(path)``: called with the folder set as ``PROMETHEUS_MULTIPROC_DIR``
    before the workers start; ``on_worker_exited(pid)``: for every worker that ended;
    ``on_worker_died(death)``: for every worker that ended unasked (`WorkerDeath`), once
    another was started in its place; ``on_hup()``: on every SIGHUP, before the reload.
    Returns the exit status: 0, or 1 when a worker
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
                                on_worker_died=on_worker_died, on_hup=on_hup)
        supervisor.run()
        return 1 if supervisor.failed else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["KILL_GRACE", "PROMETHEUS_DIR_ENV", "Supervisor", "run_workers"]
