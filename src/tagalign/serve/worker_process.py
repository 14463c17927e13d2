"""One worker process as its supervisor (`tagalign.serve.supervisor`) sees it: started
(forked from the supervisor, sharing its memory, or spawned as uvicorn does), pinged
without being waited for while it starts, and, when it ended unasked, why (`WorkerDeath`).
"""

from __future__ import annotations

import multiprocessing
import signal
import socket
from dataclasses import dataclass

from uvicorn import Config, Server
from uvicorn._subprocess import subprocess_started
from uvicorn.supervisors.multiprocess import SIGNALS, Process

from tagalign.serve.process import PROCESS, DrainingServer, exit_quietly

#: how a worker starts with ``fork``: a copy of the supervisor, sharing its pages
FORK = multiprocessing.get_context("fork")


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
            self.process = FORK.Process(target=subprocess_started, kwargs={
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


__all__ = ["FORK", "WorkerDeath", "WorkerProcess"]
