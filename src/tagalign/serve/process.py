"""What one serving process holds beyond its app, and how it stops.

A serving process — a single ``tagalign serve``, or one of the workers of a supervisor
(`tagalign.serve.supervisor`) — keeps its SIGHUP handling, whether it is stopping and the
models a supervisor preloaded for the workers it forks in one object, `ServingProcess`
(`PROCESS`: signals and a fork's memory are the process's); nothing else in
`tagalign.serve` is global.

- **SIGHUP reloads** (`Hangup`): a SIGHUP that arrives while the models still load is
  remembered and acted on once the app attaches its action.
- **SIGTERM stops gracefully, then exit 0**: the server finishes its requests in flight
  (uvicorn's ``timeout_graceful_shutdown``, `DrainingServer`, which first lets kept-alive
  clients send their last request elsewhere) and `exit_quietly` makes the process exit 0
  once uvicorn has raised the signal again.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType

from uvicorn import Config, Server

from tagalign.project import Project, model_version

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


__all__ = ["DRAIN", "PROCESS", "DrainingServer", "Hangup", "ServingProcess", "exit_quietly"]
