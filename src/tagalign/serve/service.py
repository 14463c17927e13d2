"""What both REST APIs do, in neither's terms: suggest, learn, describe a project.

tagalign's own API (`tagalign.serve.app`, ``/tagalign/v1``) and Annif's (`tagalign.serve.annif`,
``/v1``) are adapters over one `Service`: they parse their request shapes, call it and
shape its answers; everything a served project does happens here (as Annif's ``rest.py``
over its project objects). A request finds its project once (`Service.served`, by the
routers' `tagalign.serve.depends.ProjectDep`) and hands the `Served` it got to each
method it calls. Errors are `tagalign.errors.TagalignError` subclasses; each
API's single exception handler turns them into its error body with the status
`http_status` gives (the class's own).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

from tagalign.errors import (
    InputError,
    ModelFormatError,
    NotFoundError,
    NotTrainedError,
    TagalignError,
)
from tagalign.feedback import Decision, FeedbackStore, ServedStores, StoreFault
from tagalign.feedback.follow import follow_decision
from tagalign.feedback.health import StoreHealth
from tagalign.project import (
    DEFAULT_LIMIT,
    LearningNotAllowedError,
    Project,
    ReadOnlyError,
    Tagger,
)
from tagalign.records import Record
from tagalign.serve import health
from tagalign.serve.learning import Learning
from tagalign.serve.reload import LiveProjects, Reloaded
from tagalign.serve.workers import Workers
from tagalign.suggest import SuggestRequest, Tagged
from tagalign.vocab import GND_URI, normalize_subject_id

log = logging.getLogger(__name__)

#: subjects per record when neither the request nor the project says, on ``/tagalign/v1``:
#: the Project's own default, the same as `tagalign suggest` and the Python API
OWN_DEFAULT_LIMIT = DEFAULT_LIMIT
#: the same on Annif's ``/v1``: Annif's OpenAPI document gives ``limit`` a default of 10 and
#: Annif clients rely on it, so this API keeps Annif's (a project's own limit still wins)
ANNIF_DEFAULT_LIMIT = 10

#: the errors the APIs map to a status (`http_status`): every error raised on purpose
ERRORS: tuple[type[Exception], ...] = (TagalignError,)


def http_status(exc: Exception) -> int:
    """The one HTTP status of an error, for both APIs: its class's, 500 for any other."""
    return exc.http_status if isinstance(exc, TagalignError) else 500


def public_error(exc: Exception, project_id: str | None) -> Exception:
    """The error as a client may read it: a 503 (a project not trained, or a model it
    cannot load) names the project by id, never by its folder; the server log keeps the
    full message. A feedback store's fault is told as it is (its message names no folder;
    the log has said what happened, once per outage: `tagalign.feedback.faults`)."""
    if http_status(exc) != 503 or isinstance(exc, StoreFault):
        return exc
    log.warning("%s", exc)
    name = f"project {project_id!r}" if project_id else "the project"
    if isinstance(exc, NotTrainedError):
        return NotTrainedError(name)
    return ModelFormatError(f"{name} cannot load its model: retrain it (details in the "
                            "server's log)")


class UnknownProjectError(NotFoundError):
    """A request named a project this server does not serve."""

    def __init__(self, project_id: str, known: Iterable[str]):
        super().__init__(f"project {project_id!r} not found; known: "
                         f"{', '.join(sorted(known))}")
        self.project_id = project_id


class UnknownSubjectsError(InputError):
    """Learn named subject ids outside the project's vocabulary, or of headings deleted or
    split since (`tagalign vocab update`)."""

    http_status = 422  # a body that does not fit the vocabulary: the status of bad bodies


def subject_id(uri: str) -> str:
    """``https://d-nb.info/gnd/4015065-3`` (``http://``, ``gnd:`` or bare) → ``4015065-3``."""
    return normalize_subject_id(uri)


def subject_uri(sid: str) -> str:
    return GND_URI + sid


class Learned(NamedTuple):
    """What `Service.learn` did: rows stored, whether the model learned them online, and
    the redirected subject ids the request named → the targets stored and learned."""

    stored: int
    online: bool
    redirected: dict[str, str]


@dataclass(frozen=True, slots=True)
class Served:
    """A served project as one request found it (`Service.served`): the id it is served
    under and the project then live (a reload may swap in another for later requests)."""

    id: str
    project: Project


class Observer(Protocol):
    """What a `Service` tells about its work (metrics and the access log,
    `tagalign.serve.observe`): both APIs go through it, so nothing is counted twice.
    ``project_id`` is always a served project's id."""

    def suggested(self, project_id: str, tagged: Sequence[Tagged]) -> None:
        """Records were suggested for (one `Tagged` each)."""

    def learned(self, project_id: str, records: int, outcome: str) -> None:
        """A learn request of ``records`` decisions ended: ``learned`` (online),
        ``stored`` (for the next training), ``refused`` or ``invalid``."""

    def learn_failed(self, project_id: str, records: int, reason: str) -> None:
        """A learn request of ``records`` decisions stored nothing: its feedback store
        failed (``reason``: `tagalign.feedback.faults.NO_SPACE` or ``UNAVAILABLE``)."""

    def model_loaded(self, project_id: str, seconds: float, version: str,
                     trained_at: str | None) -> None:
        """A reload loaded a new model (`tagalign.serve.reload.ReloadObserver`)."""

    def model_load_failed(self, project_id: str) -> None:
        """A reload was refused; the old model keeps serving."""


class Service:
    """The served ``projects`` (id → project), their feedback ``store`` and the records
    file's ``records`` (id → record; reasons name neighbours by these titles).

    ``projects`` are served as `LiveProjects` (each may be reloaded, `reload`), taught what
    is learned through `Learning`; ``workers``: this process's siblings, if any
    (`tagalign.serve.workers`; default: it serves alone); ``observer`` hears of each
    suggest and learn."""

    def __init__(self, projects: Mapping[str, Project], store: FeedbackStore | ServedStores,
                 records: Mapping[str, Record] | None = None,
                 workers: Workers | None = None, observer: Observer | None = None):
        self.store = store
        self.workers = workers or Workers()
        self.learning = Learning(store, projects, self.workers.start_row,
                                 shared=self.workers.shared)
        self.projects = LiveProjects(projects, self.learning, on_swap=self.write_state,
                                     observer=observer)
        self.records = records or {}
        self.observer = observer
        #: neighbour titles for reasons: the records file, then records learned here
        self.titles: dict[str, str] = {rid: r.title for rid, r in self.records.items()}
        self.write_state()

    def write_state(self) -> None:
        """This worker's state file (what `info` shows of it to the others' clients)."""
        self.workers.write_state(self.projects.state())

    def served(self, project_id: str) -> Served:
        """The project served as ``project_id`` (`UnknownProjectError` if none): a request's
        one lookup."""
        if project_id not in self.projects:
            raise UnknownProjectError(project_id, self.projects)
        return Served(project_id, self.projects[project_id])

    def all_served(self) -> list[Served]:
        """Every served project, in the order served."""
        return [Served(pid, proj) for pid, proj in self.projects.items()]

    def info(self, served: Served) -> dict[str, Any]:
        """`Project.info` under the id it is served as, with the pid of the worker answering,
        the model version each worker serves (they differ while a reload goes through
        them) and whether it learns now (`tagalign.serve.health.learning`)."""
        proj, project_id = served.project, served.id
        states = self.workers.states() or [{"pid": os.getpid(),
                                             "projects": self.projects.state()}]
        return proj.info() | {"id": project_id, "worker": os.getpid(), "workers": [
            {"pid": st["pid"], **st["projects"][project_id]} for st in states
            if project_id in st.get("projects", {})],
            "learning": health.learning(proj, self.store_health(project_id))}

    def store_health(self, project_id: str) -> StoreHealth:
        """This process's view of the feedback store a project learns into."""
        if isinstance(self.store, ServedStores):
            return self.store.health(project_id)
        return self.store.health

    def checks(self) -> dict[str, Any]:
        """``/health``: each project's model and feedback store (`tagalign.serve.health`)."""
        return health.health({
            served.id: health.project_check(served.project, self.store_health(served.id),
                                            self.projects.loaded_at[served.id])
            for served in self.all_served()})

    # -- reload ------------------------------------------------------------------------
    def reload(self, served: Served) -> tuple[Reloaded, bool]:
        """Reload a project's model in this process (`LiveProjects.reload`), then ask every
        other worker to reload too; ``(what was done here, whether others were asked)``."""
        done = self.projects.reload(served.id)
        return done, self.workers.reload_siblings()

    # -- suggest -----------------------------------------------------------------------
    def suggest(self, served: Served, records: Sequence[Record], request: SuggestRequest, *,
                default_limit: int = OWN_DEFAULT_LIMIT) -> tuple[Project, list[Tagged]]:
        """`Tagger.tag` of the served project: one `Tagged` per record (cut there once),
        and the project that answered (the model a reload may have replaced since: a request
        keeps the one it started with).

        ``limit``/``threshold`` None: the project's (`Project.defaults`), else
        ``default_limit`` and 0; a ``limit`` of 0 asks for nothing (the request's bounds:
        `tagalign.suggest.LIMIT`). Blank text gets no suggestions and a warning.
        ``domains``: each record's domains when the project has a domain model (None
        otherwise)."""
        proj, project_id = self.require_trained(served), served.id
        learned = self.learning.before_suggest(project_id, proj,
                                               lambda: self.projects[project_id])
        if learned:  # other workers' records: now in this one's model
            self._keep_titles(learned)
            proj = self.projects[project_id]
        if request.limit == 0:
            tagged = [Tagged([]) for _ in records]
        else:
            if request.domains and proj.domain_model is None:
                request = replace(request, domains=False)
            tagged = Tagger(proj, default_limit).tag(records, request)
        if self.observer is not None:
            self.observer.suggested(project_id, tagged)
        return proj, tagged

    def require_trained(self, served: Served) -> Project:
        """The project, or `NotTrainedError` when it has no trained model yet (Annif asks
        this before looking at the texts)."""
        if not served.project.is_trained:
            raise NotTrainedError(f"project {served.id!r}")
        return served.project

    # -- learn -------------------------------------------------------------------------
    def learnable(self, served: Served) -> Project:
        """The project, if a learn request may change it: learning allowed
        (`LearningNotAllowedError`) and not read-only (`ReadOnlyError`). Asked before
        anything is stored, so a refused request leaves no trace."""
        proj = served.project
        try:
            proj.check_learn_allowed()
            proj.check_learnable()
        except (LearningNotAllowedError, ReadOnlyError):
            self._learned(served.id, 0, "refused")
            raise
        return proj

    def learn(self, served: Served, items: Sequence[Decision]) -> Learned:
        """Store the decisions, teach the project each record's latest decision (its
        accepted subjects replace what it learned of the record before) and keep their
        titles for reasons (`Learned`: rows stored, learned online, redirected ids). A
        recipe without online learning: not online, the stored decisions wait for the
        next `tagalign train`. Subject ids outside the vocabulary, or of headings deleted
        or split since (`tagalign vocab update`: nobody can tell which part a decision
        meant): `UnknownSubjectsError`, nothing stored; a redirected heading's id is
        stored and learned as its target's (`follow_decision`: the store holds only ids
        the vocabulary suggests). The store out of space or unreachable: `StoreFullError`
        or `StoreUnavailableError`, nothing stored (decisions stored but not yet taught,
        as the store fails between the two, are taught at the next catch-up)."""
        proj, project_id = self.learnable(served), served.id
        vocab = proj.vocab
        named = sorted({sid for d in items for sid in [*d.accepted, *d.rejected]})
        unknown = [sid for sid in named if sid not in vocab]
        gone = [sid for sid in named if sid in vocab and vocab.successor(sid) is None]
        if unknown or gone:
            self._learned(project_id, len(items), "invalid")
            why = [f"{what}: {', '.join(ids[:20])}" for what, ids in (
                ("subject ids not in the vocabulary", unknown),
                ("subject ids of headings deleted or split since", gone)) if ids]
            raise UnknownSubjectsError("; ".join(why))
        redirected = {sid: now for sid in named if (now := vocab.current(sid)) != sid}
        if redirected:
            items = [follow_decision(d, vocab.successor) for d in items]
        if not items:
            self._learned(project_id, 0, "stored")
            return Learned(0, False, redirected)
        try:
            # where learning started, known before anything of this process is stored
            self.learning.started(project_id)
            stored = self.store.add(project_id, items)
        except StoreFault as exc:  # 507 or 503: nothing stored (`tagalign.feedback.faults`)
            if self.observer is not None:
                self.observer.learn_failed(project_id, len(items), exc.reason)
            raise
        self._keep_titles(d.record for d in items)
        # taught from the store (`tagalign.serve.learning`): these rows and any other
        # worker's since, in row order. Every record, with or without accepted subjects:
        # a recipe learns per record id, the latest decision replacing earlier ones (none
        # accepted: it stops voting)
        try:
            taught, online = self.learning.catch_up(project_id,
                                                    lambda: self.projects[project_id])
        except StoreFault:  # stored, so acknowledged: taught at the next catch-up
            taught, online = [], False
        self._keep_titles(taught)
        self._learned(project_id, len(items), "learned" if online else "stored")
        return Learned(stored, online, redirected)

    def _keep_titles(self, records: Iterable[Record]) -> None:
        self.titles.update((r.id, r.title) for r in records)

    def _learned(self, project_id: str, records: int, outcome: str) -> None:
        if self.observer is not None:
            self.observer.learned(project_id, records, outcome)


__all__ = ["ANNIF_DEFAULT_LIMIT", "ERRORS", "GND_URI", "OWN_DEFAULT_LIMIT", "Learned", "Observer",
           "Served", "Service", "UnknownProjectError", "UnknownSubjectsError", "http_status",
           "public_error", "subject_id", "subject_uri"]
