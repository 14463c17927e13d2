"""Running `tagalign serve`: `serve` runs the app of some `ServerSettings` in this process
(`serve_one`) or in ``settings.workers`` worker processes behind one port (`serve_workers`,
`tagalign.serve.supervisor`), until SIGTERM or SIGINT; both stop gracefully and return.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path
from typing import Any

from tagalign.errors import TagalignError
from tagalign.serve.factory import FACTORY, build_app, preload, refresh_preloaded
from tagalign.serve.loading import note_projects_file
from tagalign.serve.process import PROCESS, DrainingServer, ServingProcess, exit_quietly
from tagalign.serve.settings import SETTINGS_ENV, ServerSettings
from tagalign.serve.supervisor import run_workers


class ServerStartError(TagalignError):
    """The server did not start serving: a worker's models did not load, say (the reason
    is logged above)."""


class NotListeningError(ServerStartError):
    """uvicorn could not start listening (a port taken, say; it logged why)."""

    exit_code = 3  # uvicorn's STARTUP_FAILURE, as `uvicorn.run` exits


def serve(settings: ServerSettings, host: str, port: int, graceful: float,
          process: ServingProcess = PROCESS) -> None:
    """Serve ``settings`` on ``host:port`` until SIGTERM or SIGINT; ``graceful``: seconds
    requests in flight may take to finish then. Raises `ServerStartError` when it cannot
    start, a loading error (`TagalignError`) when a model does not load."""
    settings = settings.read_at_start()  # the projects file: read once, now
    if settings.workers == 1:
        serve_one(settings, host, port, graceful, process)
        return
    if serve_workers(settings, host, port, graceful, process):
        raise ServerStartError("a worker failed to start (its error is above)")


def serve_one(settings: ServerSettings, host: str, port: int, graceful: float,
              process: ServingProcess = PROCESS) -> None:
    """This process serves (models loaded here); SIGTERM stops it gracefully."""
    # before loading: a SIGTERM during the load exits 0 too, a SIGHUP reloads once the app
    # exists (`Hangup`); the handlers before are back when serving ends (a caller that
    # serves in its own process, as the tests do, keeps its own)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGTERM, exit_quietly)
    process.hangup.install()
    try:
        run_server(build_app(settings, process), host, port, graceful, process.stopping)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: seconds an idle keep-alive connection stays open (uvicorn's default is 5). Longer than
#: clients and proxies keep an idle pooled connection (httpx 5 s, nginx's upstream
#: keepalive_timeout and AWS load balancers 60 s), so the server is not the side that
#: closes a connection a client is about to reuse: that race lost 2 of 101,493 requests
#: in an hour's soak at 5 s (`python -m benchmarks.faults --only soak`, issue 46).
KEEP_ALIVE = 75


def run_server(app: Any, host: str, port: int, graceful: float,
               stopping: threading.Event | None = None) -> None:
    """`uvicorn.run` with its graceful stop's pause (`DrainingServer`): serve ``app`` in this
    process until SIGTERM or SIGINT; ``stopping``: set when it stops serving (the event
    the app's answers read)."""
    import uvicorn

    # uvicorn declares the graceful pause an int; it waits with asyncio.wait_for (a float)
    server = DrainingServer(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           timeout_graceful_shutdown=graceful,  # type: ignore[arg-type]
                                           timeout_keep_alive=KEEP_ALIVE),
                            stopping or threading.Event())
    server.run()
    if not server.started:  # the port was taken, say (uvicorn logged why)
        raise NotListeningError(f"the server did not start on {host}:{port} (the reason is "
                                "above)")


def serve_workers(settings: ServerSettings, host: str, port: int, graceful: float,
                  process: ServingProcess = PROCESS) -> int:
    """``settings.workers`` workers on one port (`tagalign.serve.supervisor`), forked from
    this process after it loaded the models (``settings.preload``) or spawned; returns the
    exit status (1: a worker failed to start)."""
    import uvicorn

    # checked here, once, before any worker starts: a missing folder, a projects file's
    # error; and the feedback row the server starts after, the same for every worker
    rows = settings.start_rows()
    on_metrics_dir = on_worker_exited = on_worker_died = None
    if settings.metrics:  # one /metrics over all workers (prometheus-client's multiprocess mode)
        from tagalign.serve import metrics

        on_metrics_dir, on_worker_exited = (metrics.prepare_multiprocess_dir,
                                            metrics.worker_exited)
        on_worker_died = metrics.WorkerRestarts()

    def prepare(state_dir: Path) -> None:
        worker = dataclasses.replace(settings, state_dir=str(state_dir),
                                     supervisor=os.getpid(), learned_after=rows)
        os.environ[SETTINGS_ENV] = worker.to_json()  # what `factory.create` reads

    config = uvicorn.Config(FACTORY, factory=True, host=host, port=port,
                            workers=settings.workers, log_level="warning",
                            timeout_graceful_shutdown=graceful,  # type: ignore[arg-type]  # float: as above
                            timeout_keep_alive=KEEP_ALIVE,
                            # a worker loading GBs of model still answers the pings from a
                            # thread of its own, but give a busy machine time
                            timeout_worker_healthcheck=30)
    if settings.preload:  # before any worker: a model that does not load is the supervisor's error
        preload(settings, process)
    return run_workers(config, prepare, fork=settings.preload,
                       refresh=lambda: refresh_preloaded(settings, process),
                       on_metrics_dir=on_metrics_dir, on_worker_exited=on_worker_exited,
                       on_worker_died=on_worker_died,
                       on_hup=lambda: note_projects_file(settings))


__all__ = ["NotListeningError", "ServerStartError", "run_server", "serve", "serve_one",
           "serve_workers"]
