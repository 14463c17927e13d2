"""The app factory of `tagalign serve`: `ServerSettings` → the app one serving process runs.

`build_app` loads the models (`tagalign.serve.loading`), opens the feedback stores, reads
the records and the review queue, and builds the app (`tagalign.serve.app.create_app`);
SIGHUP then reloads the models whose folders changed (`tagalign.serve.reload`). With
``--workers N`` each worker builds its app through `create`, the factory uvicorn calls by
its import string (`FACTORY`), from the settings in `SETTINGS_ENV`.

The models load when the app is built, before the port is bound, not in the app's
lifespan: a supervisor preloads them before it forks its workers (`preload`; no app exists
there), and a model that cannot load must stop the start with its one-line error.
Preloaded projects live in `tagalign.serve.process.ServingProcess`, the one object of a
process's serving state, handed to every function here (default: this process's).
"""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path

from fastapi import FastAPI
from rich.console import Console

from tagalign.errors import TagalignError
from tagalign.feedback import ServedStores
from tagalign.project import Project
from tagalign.runtime import Runtime, cap_malloc_arenas, show_log
from tagalign.serve import accesslog
from tagalign.serve.app import create_app
from tagalign.serve.loading import (
    load_records,
    load_served,
    load_some,
    note_projects_file,
    review_queue,
    share,
)
from tagalign.serve.process import PROCESS, ServingProcess
from tagalign.serve.reload import warm
from tagalign.serve.settings import SETTINGS_ENV, ServerSettings
from tagalign.serve.tokens import TokenStore
from tagalign.serve.workers import Workers
from tagalign.shipping import swap

log = logging.getLogger(__name__)

#: malloc arenas of a serving process (`tagalign.runtime.cap_malloc_arenas`: why)
MALLOC_ARENAS = 2
#: what the app factory names to uvicorn
FACTORY = "tagalign.serve.factory:create"


def make_runtime(settings: ServerSettings) -> Runtime:
    """The `Runtime` of each serving process's models, its libraries pinned."""
    return Runtime(threads=settings.worker_threads(),
                   compile_ranker=settings.compile_ranker).apply()


# -- preloaded workers: the supervisor's part ----------------------------------------------
def preload(settings: ServerSettings, process: ServingProcess = PROCESS) -> None:
    """Load the served projects in this process (the supervisor) for workers forked after
    it. ``gc.freeze`` moves every object there is now out of the collector's reach: a
    collection in a worker would otherwise write to (and so copy) every page of them."""
    cap_malloc_arenas(MALLOC_ARENAS)  # inherited by the workers
    process.preloaded.update(share(load_served(settings, make_runtime(settings))))
    gc.collect()
    gc.freeze()


def _reload(settings: ServerSettings, pids: list[str], process: ServingProcess,
            runtime: Runtime) -> dict[str, Project]:
    paths = {pid: process.preloaded[pid].path for pid in pids}
    # whole, as a worker's reload (`tagalign.serve.reload`): no download swaps meanwhile
    return swap.read_whole(paths.values(), lambda: load_some(settings, paths, runtime))


def refresh_preloaded(settings: ServerSettings, process: ServingProcess = PROCESS) -> bool:
    """Reload, in the supervisor, the preloaded projects whose folders changed (SIGHUP, in
    a thread of its own: `tagalign.serve.rollover`); whether any did. Raises as loading
    does: the old models stay."""
    stale = process.stale()
    if not stale:
        return False
    fresh = share(_reload(settings, stale, process, make_runtime(settings)))
    gc.unfreeze()  # the old models' objects can be collected again
    process.preloaded.update(fresh)
    del fresh
    gc.collect()
    gc.freeze()
    return True


def served_projects(settings: ServerSettings, runtime: Runtime,
                    process: ServingProcess = PROCESS) -> dict[str, Project]:
    """The projects a worker serves: the supervisor's (`preload`) while their folders hold
    the model they loaded, else its own. A worker started after a reload the supervisor
    has not caught up with (one replacing a worker that died) must not serve the model the
    supervisor loaded before it."""
    if not process.preloaded:
        return load_served(settings, runtime)
    stale = process.stale()
    if not stale:
        return dict(process.preloaded)
    log.info("models changed since the server loaded them: %s; loading them in this "
             "worker", ", ".join(stale))
    return {**process.preloaded, **_reload(settings, stale, process, runtime)}


# -- one process's app ---------------------------------------------------------------------
def build_app(settings: ServerSettings, process: ServingProcess = PROCESS) -> FastAPI:
    """The app one serving process runs: its models loaded, its stores opened; SIGHUP
    then reloads the models whose folders changed (`tagalign.serve.reload`)."""
    accesslog.configure(settings.log_format)  # per process: logging is set up per process
    cap_malloc_arenas(MALLOC_ARENAS)
    loaded = served_projects(settings, make_runtime(settings), process)
    # each project's feedback where train --feedback and feedback export look for it
    store = ServedStores(loaded, settings.feedback_db)
    for proj in loaded.values():
        if proj.is_trained:
            warm(proj)  # the first request waits for nothing a check suggest loads
    recs = {r.id: r for r in load_records(Path(settings.records))} if settings.records else {}
    review = (review_queue(Path(settings.queue), settings.release_above, loaded)
              if settings.queue else None)
    workers = Workers(settings.workers,
                      Path(settings.state_dir) if settings.state_dir else None,
                      settings.supervisor, settings.learned_after)
    app = create_app(loaded, store, recs, review, max_body=settings.max_body,
                     allowed_hosts=settings.allowed_hosts, cors_origins=settings.cors_origins,
                     workers=workers,
                     tokens=(TokenStore.for_server(settings.tokens_file)
                             if settings.tokens_file else None),
                     require_token_for_suggest=settings.require_token_for_suggest,
                     metrics=settings.metrics, stopping=process.stopping)
    process.hangup.attach(lambda: _hangup(settings, app))
    return app


def _hangup(settings: ServerSettings, app: FastAPI) -> None:
    """SIGHUP: reload the models whose folders changed; a single process also says what
    became of its projects file (a worker's supervisor does, once for all)."""
    if settings.supervisor is None:
        note_projects_file(settings)
    app.state.projects.reload_in_background()


def _show_log() -> None:
    """A spawned worker shows the library's log on stderr as the command does
    (`tagalign.cli.app.log_to_console`; a forked one has that handler already)."""
    show_log(Console(stderr=True))


def create() -> FastAPI:
    """uvicorn's app factory in a worker process: the app of the settings in
    `SETTINGS_ENV`. A worker that cannot build it exits with uvicorn's
    ``STARTUP_FAILURE``, which stops the supervisor (the error would repeat)."""
    from uvicorn.config import STARTUP_FAILURE

    _show_log()
    try:
        return build_app(ServerSettings.from_json(os.environ[SETTINGS_ENV]))
    except TagalignError as exc:
        log.error("error: %s", exc)
    except Exception:  # any other: its traceback, and the server stops all the same
        log.exception("the worker's app could not be built")
    raise SystemExit(STARTUP_FAILURE)


__all__ = ["FACTORY", "MALLOC_ARENAS", "build_app", "create", "make_runtime", "preload",
           "refresh_preloaded", "served_projects"]
