"""The served projects, each replaced by a new model without a moment's downtime.

A project folder gets a new model while it is served (``tagalign train`` into it, or
``tagalign download --force``, which replaces the whole folder). `LiveProjects.reload`
then loads the folder *beside* the model serving (for a while the process holds both:
its memory for the model doubles, less with ``--mmap``, whose pages the page cache
shares), checks it (one suggest), teaches it what was learned since the server started
(`tagalign.serve.learning`) and swaps it in with one reference assignment. A request
takes the project once when it starts and finishes on that object, so requests running
during the swap finish on the old model and the next ones get the new one; the old model
is freed when the last of them ends. A model that fails to load or to suggest is refused:
the old one keeps serving, the log says why (the observer hears of it: `ReloadObserver`),
and so does the HTTP answer (`ReloadFailedError`, 409).

Reloads of one project run one at a time; a folder whose model has the version served
(`tagalign.project.model_version`, its manifest's hash) is left alone ("unchanged"). A
reload reads the folder under the lock `tagalign download` swaps it under
(`tagalign.shipping.swap.read_whole`), so a download swapping the folder meanwhile waits
for the load to end, and the load sees the old version or the new one whole, never a mix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, Protocol

from tagalign.errors import ConflictError, TagalignError
from tagalign.project import ModelVersion, NotTrainedError, Project, Tagger, model_version
from tagalign.records import Record
from tagalign.serve.learning import Learning
from tagalign.serve.workers import now
from tagalign.shipping import swap
from tagalign.suggest import SuggestRequest

log = logging.getLogger(__name__)


class ReloadFailedError(ConflictError):
    """A project's folder holds a model that could not be loaded or does not suggest; the
    model loaded before keeps serving (409: the folder's state conflicts with a reload)."""


@dataclass(frozen=True)
class Reloaded:
    """What one reload did: ``status`` "reloaded" or "unchanged"; the version now served
    and the one before; seconds taken; records learned since the start taught to it."""

    project_id: str
    status: Literal["reloaded", "unchanged"]
    version: ModelVersion | None
    previous: ModelVersion | None
    seconds: float
    learned: int = 0


def _known(v: ModelVersion | None) -> ModelVersion | None:
    """``v`` when it names a model (`model_version` of a folder without one: None)."""
    return v if v and v["version"] is not None else None


def warm(project: Project) -> None:
    """One suggest for a made-up record (a vocabulary label, in its language): raises when
    the model cannot answer, and loads the parts a model reads on first use, so a new
    worker or model answers its first client as fast as the next. The record names its
    language: the language detector's dictionaries (seconds to load, ~140 MB in each
    process) load only when a request without a language first needs them."""
    subject = next(iter(project.vocab))
    language, label = next(iter(subject.labels.items()))
    Tagger(project).tag([Record(id="warm-up", title=label, language=language)],
                        SuggestRequest(limit=1))


class ReloadObserver(Protocol):
    """Who hears of reloads (the app's metrics, `tagalign.serve.observe.Telemetry`)."""

    def model_loaded(self, project_id: str, seconds: float, version: str,
                     trained_at: str | None) -> None:
        """A reload loaded the model ``version`` (`tagalign.project.ModelVersion`)."""

    def model_load_failed(self, project_id: str) -> None:
        """A reload was refused; the old model keeps serving."""


class LiveProjects(Mapping[str, Project]):
    """Project id → the project serving now; `reload` replaces one. ``learning`` keeps the
    models taught (`tagalign.serve.learning`); ``on_swap`` runs after every swap (a worker
    writes its state file there); ``observer`` hears of every reload."""

    def __init__(self, projects: Mapping[str, Project], learning: Learning, *,
                 on_swap: Callable[[], None] | None = None,
                 observer: ReloadObserver | None = None):
        self._current: dict[str, Project] = dict(projects)
        self.learning = learning
        self.on_swap = on_swap
        self.observer = observer
        self.loaded_at = dict.fromkeys(self._current, now())
        self._reloading = {pid: threading.Lock() for pid in self._current}

    # -- the mapping: what requests read ---------------------------------------------
    def __getitem__(self, project_id: str) -> Project:
        return self._current[project_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current)

    def __len__(self) -> int:
        return len(self._current)

    def state(self) -> dict[str, dict[str, Any]]:
        """Per project id: the version serving and since when (a worker's state file)."""
        return {pid: {**(_known(p.model_version) or {"version": None, "trained_at": None}),
                      "loaded_at": self.loaded_at[pid]}
                for pid, p in self._current.items()}

    # -- reloading -------------------------------------------------------------------
    def reload(self, project_id: str) -> Reloaded:
        """Load the project's folder again if its model changed, and serve it; raises
        `ReloadFailedError` (the old model still serving) when it cannot be served."""
        with self._reloading[project_id]:
            old = self._current[project_id]
            start = time.perf_counter()
            try:
                # read whole: a download swapping the folder waits, or is waited for
                new = swap.read_whole([old.path], lambda: self._load_changed(old))
                if new is None:
                    found = _known(old.model_version)
                    return Reloaded(project_id, "unchanged", found, found, 0.0)
                learned = self.learning.replay(project_id, new,
                                               lambda: self._swap(project_id, new))
            except Exception as exc:  # anything: the old model must keep serving
                self._refuse(project_id, old, exc)
            seconds = time.perf_counter() - start
        version, previous = _known(new.model_version), _known(old.model_version)
        assert version is not None  # a trained model was loaded
        log.info("project %s: model %s (trained %s) loaded in %.1f s, replacing %s; %d "
                 "learned records taught to it", project_id, version["version"],
                 version["trained_at"], seconds,
                 previous["version"] if previous else "none", learned)
        self._tell("model_loaded", project_id, seconds, version["version"],
                   version["trained_at"])
        return Reloaded(project_id, "reloaded", version, previous, seconds, learned)

    def reload_all(self) -> list[Reloaded | ReloadFailedError]:
        """`reload` every project (each failure logged and returned, the others go on)."""
        out: list[Reloaded | ReloadFailedError] = []
        for pid in list(self._current):
            try:
                out.append(self.reload(pid))
            except ReloadFailedError as exc:
                out.append(exc)
        return out

    def reload_in_background(self) -> threading.Thread:
        """`reload_all` in a thread of its own (a signal handler must return at once)."""
        thread = threading.Thread(target=self.reload_all, name="tagalign-reload",
                                  daemon=True)
        thread.start()
        return thread

    def _load_changed(self, old: Project) -> Project | None:
        """The folder's project when its model is not ``old``'s (`_load`), else None."""
        found = _known(model_version(old.path))
        if found is None:
            raise NotTrainedError("the folder", "it holds no trained model (PROJECT/model/)")
        if old.is_trained and found == _known(old.model_version):
            return None
        return self._load(old)

    def _load(self, old: Project) -> Project:
        """The folder's project beside ``old``, with ``old``'s serving settings, checked."""
        config = Project.read_config(old.path)
        vocab = old.vocab if (config["vocabulary"]["fingerprint"] == old.vocab.fingerprint
                              and config["vocabulary"]["size"] == len(old.vocab)) else None
        new = Project.load(old.path, vocab, mmap=old.mmap, runtime=old.runtime
                           ).with_serving(old.serving, old.domain_model)
        if not new.is_trained:  # model/ vanished between the version check and the load
            raise NotTrainedError("the folder", "it holds no trained model (PROJECT/model/)")
        warm(new)  # a model that loads but cannot answer must not replace one that can
        _ = new.vocab.prefix_index  # subject search ready, as at start (`subjects.warm`)
        return new

    def _swap(self, project_id: str, new: Project) -> None:
        self._current = {**self._current, project_id: new}  # one assignment: atomic
        self.loaded_at[project_id] = now()
        if self.on_swap is not None:
            self.on_swap()

    def _tell(self, what: str, *args: Any) -> None:
        if self.observer is None:
            return
        try:
            getattr(self.observer, what)(*args)
        except Exception:  # an observer's bug must never break a reload
            log.exception("the reload observer's %s failed", what)

    def _refuse(self, project_id: str, old: Project, exc: Exception) -> NoReturn:
        served = (_known(old.model_version) or {"version": "none"})["version"]
        log.error("project %s: reload refused, the model loaded before (%s) keeps serving: "
                  "%s: %s", project_id, served, type(exc).__name__, exc)
        self._tell("model_load_failed", project_id)
        # the answer names no server path (as every answer, `service.public_error`)
        reason = str(exc)
        for folder in {str(old.path.resolve()), str(old.path)}:
            reason = reason.replace(folder, "PROJECT")
        kind = "" if isinstance(exc, TagalignError) else f"{type(exc).__name__}: "
        raise ReloadFailedError(
            f"project {project_id!r}: the model in its folder was not loaded ({kind}"
            f"{reason}); the model loaded before (version {served}) keeps serving") from exc


__all__ = ["LiveProjects", "ReloadFailedError", "ReloadObserver", "Reloaded", "warm"]
