"""What a serving process loads before it serves: the projects of its `ServerSettings`
(each with its `tagalign.project.ServingSettings`), the records file and the review queue.

Everything here raises `TagalignError`s (the CLI prints them as one line; a worker that
cannot load exits with uvicorn's startup failure, `tagalign.serve.factory.create`) and
tells what it loaded through ``logging``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path

from tagalign.errors import InputError, NotFoundError
from tagalign.project import Project, ServingSettingError, ServingSettings
from tagalign.projects_file import (
    ProjectsFileError,
    ProjectSpec,
    open_project,
    read_projects,
    read_text,
)
from tagalign.records import InputReport, Record, read_records
from tagalign.runtime import Runtime
from tagalign.serve.queue import RecordQueue
from tagalign.serve.settings import ServerSettings

log = logging.getLogger(__name__)


def _describe(pid: str, proj: Project, mmap: bool) -> None:
    state = "" if proj.is_trained else " (not trained yet: suggest answers 503)"
    version = (f", model {proj.model_version['version']}"
               if proj.model_version and proj.model_version["version"] else "")
    log.info("project %s: %s, %d subjects%s%s%s%s%s", pid, proj.config.recipe,
             len(proj.vocab), version, " (memory-mapped, read-only)" if mmap else "",
             ", learning allowed" if proj.allow_learn else "",
             f", {len(proj.excluded)} excluded" if proj.rules else "", state)


def load_folders(paths: list[Path], serving: ServingSettings, *, mmap: bool,
                 runtime: Runtime | None = None) -> dict[str, Project]:
    """The trained project folders given to ``serve``, by folder name, each served with
    ``serving`` (``--allow-learn``; ``--domains``: a domain model beside the one folder,
    checked against its vocabulary)."""
    loaded = {}
    for path in paths:
        try:
            proj = Project.load(path, mmap=mmap, runtime=runtime)
        except FileNotFoundError as exc:
            raise NotFoundError(str(exc)) from None
        proj.trained_recipe()
        if path.name in loaded:  # the folder name is the project id in every URL
            raise InputError(f"two projects are named {path.name!r}; rename one folder")
        try:
            proj = proj.with_serving(serving)
        except ServingSettingError as exc:  # only --domains can fail for a folder
            raise InputError(f"--{exc.key}: {exc}") from None
        loaded[path.name] = proj
        _describe(path.name, proj, mmap)
    return loaded


def load_specs(specs: Mapping[str, ProjectSpec], *, mmap: bool,
               runtime: Runtime | None = None) -> dict[str, Project]:
    """The projects of a projects file's tables, each served with its table's settings;
    one not trained yet is served untrained."""
    loaded = {}
    for pid, spec in specs.items():
        loaded[pid] = open_project(spec, mmap=mmap, runtime=runtime)
        if not spec.trained_folder:
            log.warning("%s: no trained project at %s", spec.where("path"), spec.path)
        _describe(pid, loaded[pid], mmap)
    return loaded


def load_served(settings: ServerSettings, runtime: Runtime) -> dict[str, Project]:
    """The projects ``settings`` serve, loaded."""
    if settings.projects_file:
        return load_specs(settings.project_specs(), mmap=settings.mmap, runtime=runtime)
    return load_folders([Path(p) for p in settings.projects], settings.folder_serving(),
                        mmap=settings.mmap, runtime=runtime)


def note_projects_file(settings: ServerSettings) -> None:
    """On SIGHUP: one log line when the projects file is no longer the text the server read
    at start (`ServerSettings.read_at_start`) — broken, gone or changed. Nothing changes:
    the projects and their settings stay as read at start, a reload reads only their
    folders."""
    if not settings.projects_file or settings.projects_text is None:
        return
    path = Path(settings.projects_file)
    try:
        text = read_text(path)
        read_projects(path, text)
    except ProjectsFileError as exc:
        log.warning("%s; the projects read from it at start keep serving as they were",
                    exc)
        return
    if text != settings.projects_text:
        log.warning("projects file %s changed since the server started; a reload reads "
                    "only the project folders: restart the server to serve its changes",
                    path)


def load_some(settings: ServerSettings, paths: Mapping[str, Path], runtime: Runtime
              ) -> dict[str, Project]:
    """The projects of ``settings`` whose ids ``paths`` names (id → folder), loaded again
    (a model swap: only the projects whose folders changed)."""
    pids = list(paths)
    only = (dataclasses.replace(settings, only=",".join(pids)) if settings.projects_file
            else dataclasses.replace(settings, projects=[str(paths[pid]) for pid in pids]))
    return load_served(only, runtime)


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


def load_records(path: Path) -> list[Record]:
    """The records of a file the server reads (``--records``, ``--queue``); bad lines are
    skipped and counted (the summary is logged)."""
    report = InputReport()
    try:
        records = list(read_records(path, report=report))
    except FileNotFoundError as exc:
        raise NotFoundError(str(exc)) from None
    if (summary := report.end_summary()) is not None:
        log.warning("%s", summary)
    log.info("%d records from %s", len(records), path)
    return records


def review_queue(path: Path, release_above: float | None, loaded: Mapping[str, Project]
                 ) -> RecordQueue:
    """The review queue of the records at ``path``, its records chosen per trained
    project (`tagalign.serve.queue`)."""
    try:
        review = RecordQueue(load_records(path), release_above, name=path.name)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None
    for pid, proj in loaded.items():
        if not proj.is_trained:
            continue
        sel = review.select(pid, proj)
        log.info("queue for %s: %d records%s", pid, len(sel.records),
                 f" ({sel.skipped} released above {release_above})" if sel.estimated
                 else " (no quality estimates: all records)"
                 if release_above is not None else "")
    return review


__all__ = ["load_folders", "load_specs", "load_records", "load_served", "load_some",
           "note_projects_file", "review_queue", "share"]
