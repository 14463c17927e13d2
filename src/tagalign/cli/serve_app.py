"""What `tagalign serve` runs: its settings, the app one serving process builds from them,
and the two ways to run it (`serve_one`: this process; `serve_workers`: N spawned worker
processes behind one port, `tagalign.serve.supervisor`).

The settings are plain values (`ServeSettings`), checked by the command before anything
starts. One process builds the app from them (`build_app`: models, feedback stores,
records, review queue); with ``--workers N`` each worker does, from the settings the
supervisor hands it as JSON in `SETTINGS_ENV` (uvicorn builds a worker's app by calling a
factory named by an import string, `create`, and passes nothing else to it).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from tagalign.cli.app import console, fail, log_to_console
from tagalign.cli.common import load_records, make_runtime
from tagalign.errors import InputError, TagalignError
from tagalign.project import Project, feedback_location, model_version
from tagalign.runtime import Runtime, cap_malloc_arenas
from tagalign.serve import MAX_BODY, accesslog, events

#: malloc arenas of a serving process (`tagalign.runtime.cap_malloc_arenas`: why)
MALLOC_ARENAS = 2
#: the environment variable that carries `ServeSettings` to the workers
SETTINGS_ENV = "TAGALIGN_SERVE_SETTINGS"
#: what the app factory names to uvicorn
FACTORY = "tagalign.cli.serve_app:create"


@dataclass
class ServeSettings:
    """`tagalign serve`'s options as plain values (JSON for the workers); paths as text."""

    projects: list[str] = field(default_factory=list)
    projects_file: str | None = None
    only: str | None = None
    feedback_db: str | None = None
    records: str | None = None
    queue: str | None = None
    release_above: float | None = None
    threads: int = 0
    compile_ranker: bool = True
    mmap: bool = False
    allow_learn: bool = False
    max_body: int = MAX_BODY
    allowed_hosts: list[str] = field(default_factory=list)
    cors_origins: list[str] = field(default_factory=list)
    workers: int = 1
    tokens_file: str | None = None
    require_token_for_suggest: bool = False
    metrics: bool = True
    log_format: str = "auto"
    preload: bool = True
    #: a domain model served beside the one project folder (``serve --domains``)
    domains: str | None = None
    # set by the supervisor for its workers (`tagalign.serve.workers.Workers`)
    state_dir: str | None = None
    supervisor: int | None = None
    learned_after: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        return cls(**json.loads(text))

    def worker_threads(self) -> int:
        """Threads each process's models use: ``--threads``, else the machine's cores
        shared out among the workers (N workers each using every core would make the
        cores' thread pools wait for each other)."""
        if self.threads or self.workers == 1:
            return self.threads
        return max(1, (os.cpu_count() or 1) // self.workers)

    def served(self) -> dict[str, tuple[Path, str | None]]:
        """Project id → (folder, projects file's feedback_db), read without loading a
        model: checks what can be checked before workers start (a missing or untrained
        folder, a projects file's errors) and tells where each one's feedback is."""
        if self.projects_file:
            from tagalign.projects_file import read_projects, select

            only = [x.strip() for x in self.only.split(",") if x.strip()] if self.only else None
            specs = select(read_projects(self.projects_file), only, Path(self.projects_file))
            return {pid: (spec.path, spec.feedback_db) for pid, spec in specs.items()}
        out: dict[str, tuple[Path, str | None]] = {}
        for folder in map(Path, self.projects):
            Project.check_trained_folder(folder)
            if folder.name in out:  # the folder name is the project id in every URL
                raise InputError(f"two projects are named {folder.name!r}; rename one folder")
            out[folder.name] = (folder, None)
        return out

    def start_rows(self) -> dict[str, int]:
        """Per project id, the last row of its feedback store now: what was stored after
        it reaches every worker (`tagalign.serve.learning`). Opens each store once,
        creating its tables before the workers open it."""
        from tagalign.serve.feedback import prepare

        return {pid: prepare(feedback_location(path, db, self.feedback_db)[0])
                for pid, (path, db) in self.served().items()}


# -- one process's app -------------------------------------------------------------------
def _log(pid: str, proj: Project, mmap: bool) -> None:
    state = "" if proj.is_trained else " [yellow](not trained yet: suggest answers 503)[/]"
    version = (f", model {proj.model_version['version']}"
               if proj.model_version and proj.model_version["version"] else "")
    console.log(f"project {pid}: {proj.config['recipe']}, {len(proj.vocab)} subjects"
                + version + (" (memory-mapped, read-only)" if mmap else "")
                + (", learning allowed" if proj.allow_learn else "")
                + (f", {len(proj.excluded)} excluded" if proj.rules else "") + state)


def load_folders(paths: list[Path], *, mmap: bool, allow_learn: bool,
                 runtime: Runtime | None = None, domains: Path | None = None
                 ) -> dict[str, Project]:
    """The project folders given to ``serve``, by folder name; ``domains``: a domain model
    to serve beside the one folder (`tagalign.project.domains`, checked against its
    vocabulary)."""
    loaded = {}
    for path in paths:
        try:
            with console.status(f"loading {path} …"):
                proj = Project.load(path, mmap=mmap, runtime=runtime)
        except FileNotFoundError as exc:
            fail(escape(str(exc)))
        proj.trained_recipe()
        if path.name in loaded:  # the folder name is the project id in every URL
            fail(f"two projects are named {path.name!r}; rename one folder")
        proj.allow_learn = allow_learn
        if domains is not None:
            # here, not at the top: the classifiers import torch (as in a projects file)
            from tagalign.project.domains import attach

            try:
                attach(proj, domains)
            except (TagalignError, OSError, ValueError) as exc:
                fail(f"--domains: {escape(str(exc))}")
        loaded[path.name] = proj
        _log(path.name, proj, mmap)
    return loaded


def load_projects_file(source: Path, only: str | None, *, mmap: bool,
                       runtime: Runtime | None = None) -> dict[str, Project]:
    """The projects of a projects file; one not trained yet is served untrained."""
    from tagalign.projects_file import open_project, read_projects, select

    loaded = {}
    specs = select(read_projects(source),
                   [x.strip() for x in only.split(",") if x.strip()] if only else None,
                   source)
    for pid, spec in specs.items():
        with console.status(f"loading {pid} ({spec.path}) …"):
            loaded[pid] = open_project(spec, mmap=mmap, runtime=runtime)
        if not spec.trained_folder:
            console.log(f"[yellow]{spec.where('path')}: no trained project at "
                        f"{spec.path}[/]")
        _log(pid, loaded[pid], mmap)
    return loaded


def review_queue(queue, release_above: float | None, loaded: dict[str, Project]):
    from tagalign.serve.queue import RecordQueue

    try:
        review = RecordQueue(load_records(queue), release_above, name=queue.name)
    except ValueError as exc:
        fail(f"{queue}: {exc}")
    for pid, proj in loaded.items():
        if not proj.is_trained:
            continue
        with console.status(f"choosing the records of {pid}'s queue …"):
            sel = review.select(pid, proj)
        console.log(f"queue for {pid}: {len(sel.records)} records"
                    + (f" ({sel.skipped} released above {release_above})" if sel.estimated
                       else " (no quality estimates: all records)"
                       if release_above is not None else ""))
    return review


def load_served(settings: ServeSettings, runtime: Runtime) -> dict[str, Project]:
    """The projects ``settings`` serve, loaded."""
    if settings.projects_file:
        return load_projects_file(Path(settings.projects_file), settings.only,
                                  mmap=settings.mmap, runtime=runtime)
    return load_folders([Path(p) for p in settings.projects], mmap=settings.mmap,
                        allow_learn=settings.allow_learn, runtime=runtime,
                        domains=Path(settings.domains) if settings.domains else None)


#: the projects the supervisor loaded before it forked its workers (`preload`), which every
#: worker then serves: their memory is the supervisor's, shared by all (a page is copied
#: only when a worker writes to it)
_PRELOADED: dict[str, Project] = {}


def preload(settings: ServeSettings) -> None:
    """Load the served projects in this process (the supervisor) for workers forked after
    it. ``gc.freeze`` moves every object there is now out of the collector's reach: a
    collection in a worker would otherwise write to (and so copy) every page of them."""
    import tagalign.serve.app  # noqa: F401  (what a worker imports: shared, not imported N times)
    import tagalign.serve.feedback  # noqa: F401
    import tagalign.serve.tokens  # noqa: F401

    cap_malloc_arenas(MALLOC_ARENAS)  # inherited by the workers
    runtime = make_runtime(settings.worker_threads(), settings.compile_ranker)
    _PRELOADED.update(share(load_served(settings, runtime)))
    gc.collect()
    gc.freeze()


def share(projects: dict[str, Project]) -> dict[str, Project]:
    """``projects`` with what every worker would otherwise build for itself built here,
    before the fork: the vocabulary's prefix index (subject search). Built in a worker,
    it costs that worker its own copy, and walking 205k subjects to build it writes to
    every subject object's reference count, so the worker copies the pages of the
    vocabulary it shared too (measured on the full GND project: 283 → 66 MiB private per
    idle worker). No model runs here: no thread pool exists to be forked."""
    for proj in projects.values():
        _ = proj.vocab.prefix_index
    return projects


def _stale() -> list[str]:
    """The preloaded projects whose folders hold another model now."""
    return [pid for pid, proj in _PRELOADED.items()
            if proj.model_version != model_version(proj.path)]


def _load_only(settings: ServeSettings, pids: list[str], runtime: Runtime
               ) -> dict[str, Project]:
    only = (dataclasses.replace(settings, only=",".join(pids)) if settings.projects_file
            else dataclasses.replace(settings, projects=[str(_PRELOADED[pid].path)
                                                         for pid in pids]))
    return load_served(only, runtime)


def refresh_preloaded(settings: ServeSettings) -> bool:
    """Reload, in the supervisor, the preloaded projects whose folders changed (SIGHUP, in
    a thread of its own: `tagalign.serve.rollover`); whether any did. Raises as loading
    does: the old models stay."""
    stale = _stale()
    if not stale:
        return False
    fresh = share(_load_only(settings, stale, make_runtime(settings.worker_threads(),
                                                           settings.compile_ranker)))
    gc.unfreeze()  # the old models' objects can be collected again
    _PRELOADED.update(fresh)
    del fresh
    gc.collect()
    gc.freeze()
    return True


def _served_projects(settings: ServeSettings, runtime: Runtime) -> dict[str, Project]:
    """The projects a worker serves: the supervisor's (`preload`) while their folders hold
    the model they loaded, else its own. A worker started after a reload the supervisor
    has not caught up with (one replacing a worker that died) must not serve the model the
    supervisor loaded before it."""
    if not _PRELOADED:
        return load_served(settings, runtime)
    stale = _stale()
    if not stale:
        return dict(_PRELOADED)
    console.log(f"models changed since the server loaded them: {', '.join(stale)}; "
                "loading them in this worker")
    return {**_PRELOADED, **_load_only(settings, stale, runtime)}


def build_app(settings: ServeSettings) -> Any:
    """The app one serving process runs: its models loaded, its stores opened; SIGHUP
    then reloads the models whose folders changed (`tagalign.serve.reload`)."""
    from tagalign.serve.app import create_app
    from tagalign.serve.feedback import ServedStores
    from tagalign.serve.reload import warm
    from tagalign.serve.supervisor import HANGUP
    from tagalign.serve.tokens import TokenStore
    from tagalign.serve.workers import Workers

    accesslog.configure(settings.log_format)  # per process: logging is set up per process
    cap_malloc_arenas(MALLOC_ARENAS)
    runtime = make_runtime(settings.worker_threads(), settings.compile_ranker)
    loaded = _served_projects(settings, runtime)
    # each project's feedback where train --feedback and feedback export look for it
    try:
        store = ServedStores(loaded, settings.feedback_db)
    except InputError as exc:
        fail(escape(str(exc)))
    for pid, proj in loaded.items():
        if proj.is_trained:
            with console.status(f"warming {pid} up …"):
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
                     tokens=TokenStore.read(settings.tokens_file) if settings.tokens_file else None,
                     require_token_for_suggest=settings.require_token_for_suggest,
                     metrics=settings.metrics)
    projects = app.state.projects
    projects.announce()
    # reloads from now on reach this app's metrics (the loads at start it counted itself);
    # one app per process: callbacks of an app served before in this process are dropped
    observe_reloads(app.state.metrics)
    HANGUP.attach(projects.reload_in_background)
    return app


#: the reload callbacks of the app this process serves (`observe_reloads`)
_SUBSCRIBED: list[tuple[list, Any]] = []


def observe_reloads(metrics: Any) -> None:
    """Subscribe an app's metrics (`tagalign.serve.metrics`) to the reload events
    (`tagalign.serve.events`), in place of an app served before in this process."""
    for callbacks, callback in _SUBSCRIBED:
        if callback in callbacks:
            callbacks.remove(callback)

    def loaded(project_id: str, seconds: float, version: str, trained_at: str | None) -> None:
        metrics.model_loaded(project_id, seconds, version, trained_at or "")

    _SUBSCRIBED[:] = [(events.on_model_loaded, loaded),
                      (events.on_model_load_failed, metrics.model_load_failed)]
    for callbacks, callback in _SUBSCRIBED:
        callbacks.append(callback)


def create() -> Any:
    """uvicorn's app factory in a worker process: the app of the settings in
    `SETTINGS_ENV`. A worker that cannot build it exits with uvicorn's
    ``STARTUP_FAILURE``, which stops the supervisor (the error would repeat)."""
    from uvicorn.config import STARTUP_FAILURE

    log_to_console()
    try:
        return build_app(ServeSettings.from_json(os.environ[SETTINGS_ENV]))
    except SystemExit:  # `fail` printed the error already
        pass
    except TagalignError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
    except Exception:  # any other: its traceback, and the server stops all the same
        console.print_exception()
    raise SystemExit(STARTUP_FAILURE)


# -- running -----------------------------------------------------------------------------
def serve_one(settings: ServeSettings, host: str, port: int, graceful: float) -> None:
    """This process serves (models loaded here); SIGTERM stops it gracefully, exit 0."""
    from tagalign.serve.supervisor import HANGUP, exit_quietly

    # before loading: a SIGTERM during the load exits 0 too, a SIGHUP reloads once the app
    # exists (`Hangup`); the handlers before are back when serving ends (a caller that
    # serves in its own process, as the tests do, keeps its own)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGTERM, exit_quietly)
    HANGUP.install()
    try:
        run_server(build_app(settings), host, port, graceful)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_server(app: Any, host: str, port: int, graceful: float) -> None:
    """`uvicorn.run` with its graceful stop's pause (`DrainingServer`): serve ``app`` in this
    process until SIGTERM or SIGINT."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from tagalign.serve.supervisor import DrainingServer

    server = DrainingServer(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           timeout_graceful_shutdown=graceful))
    server.run()
    if not server.started:  # the port was taken, say: as uvicorn.run exits
        raise SystemExit(STARTUP_FAILURE)


def serve_workers(settings: ServeSettings, host: str, port: int, graceful: float) -> int:
    """``settings.workers`` spawned workers on one port (`tagalign.serve.supervisor`);
    returns the exit status."""
    import uvicorn

    from tagalign.serve.supervisor import run_workers

    # checked here, once, before any worker starts: a missing folder, a projects file's
    # error; and the feedback row the server starts after, the same for every worker
    rows = settings.start_rows()
    if settings.metrics:  # one /metrics over all workers (prometheus-client's multiprocess mode)
        from tagalign.serve import metrics

        if metrics.prepare_multiprocess_dir not in events.on_multiprocess_dir:
            events.on_multiprocess_dir.append(metrics.prepare_multiprocess_dir)
            events.on_worker_exited.append(metrics.worker_exited)

    def prepare(state_dir: Path) -> None:
        worker = dataclasses.replace(settings, state_dir=str(state_dir),
                                     supervisor=os.getpid(), learned_after=rows)
        os.environ[SETTINGS_ENV] = worker.to_json()

    config = uvicorn.Config(FACTORY, factory=True, host=host, port=port,
                            workers=settings.workers, log_level="warning",
                            timeout_graceful_shutdown=graceful,
                            # a worker loading GBs of model still answers the pings from a
                            # thread of its own, but give a busy machine time
                            timeout_worker_healthcheck=30)
    if settings.preload:
        try:
            preload(settings)
        except TagalignError as exc:  # before any worker: the error is the supervisor's
            fail(escape(str(exc)))
    return run_workers(config, prepare, fork=settings.preload,
                       refresh=lambda: refresh_preloaded(settings))


__all__ = ["FACTORY", "SETTINGS_ENV", "ServeSettings", "build_app", "create",
           "load_folders", "load_projects_file", "review_queue", "run_server", "serve_one",
           "serve_workers"]
