"""Prometheus metrics of a served app (``GET /metrics``), with `prometheus_client`.

What is counted, and the labels (each from a small fixed set, never a record's text):

- requests and their latency per route template (``/v1/projects/{project_id}/suggest``,
  not the path), method, status and project — the id of a served project, else ``""``, so
  requests for made-up ids cannot grow the number of series; errors (status ≥ 400) by
  status and route once more, for alerts;
- records suggested for and subjects returned, learn calls by outcome, learn calls that
  failed because the feedback store did (``tagalign_learn_failures_total``: by
  `LEARN_FAILURES` reason), the estimated
  recall and precision of each record's list (histograms; `tagalign.suggest.Quality`);
- per project the model's load time and version (`tagalign.project.model_version`),
  reloads by outcome;
- per project its feedback store as the answering process sees it (`StoreGauges`): up
  (1) or not (0: unavailable or full), and when a statement last ran on it.

Each app gets its own `Metrics`, kept in its own `CollectorRegistry` (never the global
default registry: tests build many apps in one process). With several worker processes
behind one port the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` to a fresh directory
(`prepare_multiprocess_dir`) before it starts them: each worker writes its values there
(prometheus_client's multiprocess mode) and any worker's ``/metrics`` answers the sum over
all of them; the supervisor calls `worker_exited` for a worker that ended, and counts the
workers it had to replace (`WorkerRestarts`: ``tagalign_worker_restarts_total`` by cause,
such as ``SIGKILL`` for one the kernel's OOM killer ended).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tagalign.feedback.health import StoreHealth
from tagalign.project import Project, model_version
from tagalign.suggest import Tagged

if TYPE_CHECKING:
    from tagalign.serve.worker_process import WorkerDeath

#: the environment variable of prometheus_client's multiprocess mode (its directory)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: request latency: a single-record suggest takes milliseconds, a batch of 32 up to seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)
#: estimated recall and precision lie in [0, 1]
SHARE_BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))
#: `learn` outcomes: learned online, stored only (for the next training), refused (learning
#: not allowed or read-only), invalid (subject ids outside the vocabulary)
LEARN_OUTCOMES = ("learned", "stored", "refused", "invalid")
#: why a learn request stored nothing although it was valid: its feedback store's disk is
#: full, or its database unavailable (`tagalign.feedback.faults`)
LEARN_FAILURES = ("no_space", "unavailable")


def multiprocess_dir() -> str | None:
    """The directory of multiprocess mode, or None (values in this process only)."""
    return os.environ.get(MULTIPROC_ENV) or None


def prepare_multiprocess_dir(path: Path | str) -> Path:
    """Create ``path``, or empty it of metric files, for the workers to be started: values
    left by an earlier server would be added to the new one's (prometheus_client's rule:
    wipe it before start). Only its ``*.db`` files go (a directory named by mistake keeps
    everything else). The caller then sets `MULTIPROC_ENV` to it for the workers."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for db in path.glob("*.db"):
        db.unlink()
    return path


def worker_exited(pid: int, path: Path | str | None = None) -> None:
    """Forget the gauges of a worker process that ended (its counts stay in the sums):
    the supervisor calls this for each worker it sees exit. ``path``: the directory
    (default: `MULTIPROC_ENV`)."""
    multiprocess.mark_process_dead(pid, str(path) if path is not None else None)


class WorkerRestarts:
    """The supervisor's own metric: workers that ended unasked and were started again, by
    ``cause`` (`tagalign.serve.worker_process.WorkerDeath.cause`: a signal's name such as
    ``SIGKILL``, ``exit N``, ``unresponsive``). It lives in the supervisor process and is
    written to the multiprocess directory as the workers' metrics are, so every worker's
    ``/metrics`` shows it; the counter is made at the first restart, once the supervisor
    has set that directory."""

    def __init__(self) -> None:
        self.counter: Counter | None = None

    def __call__(self, death: WorkerDeath) -> None:
        if self.counter is None:
            _follow_env()
            self.counter = Counter(
                "tagalign_worker_restarts", "Workers that ended unasked (killed by a "
                "signal, exited, stopped answering) and were started again, by cause",
                ["cause"], registry=None if multiprocess_dir() else CollectorRegistry())
        self.counter.labels(death.cause).inc()


def _follow_env() -> None:
    """Values to files exactly when `MULTIPROC_ENV` is set now.

    prometheus_client chooses where values live once, when it is imported
    (``values.ValueClass``). A worker forked from a process that imported it before the
    supervisor set the variable would keep its counts to itself and ``/metrics`` would show
    one worker's share; choosing again here (the library's own function) makes the mode
    follow the environment the app is created in."""
    wanted = multiprocess_dir() is not None
    if wanted != (values.ValueClass is not values.MutexValue):
        values.ValueClass = values.get_value_class()


class StoreGauges(Collector):
    """The feedback stores' gauges, read from their `StoreHealth` at each scrape (a
    collector: values current when ``/metrics`` answers, not when a learn last ran):

    - ``tagalign_feedback_store_up{project}``: 1 while the store works, 0 while it is
      unavailable or full (learns answer 503 or 507);
    - ``tagalign_feedback_store_last_reachable_timestamp_seconds{project}``: when a
      statement last ran on it (Unix time; no sample before the first). A time, not an
      age, as Prometheus' conventions have it (``process_start_time_seconds``): it stays
      true however late a scrape is stored, and ``time() - …`` is the age in a query.

    Not multiprocess gauges: each process has its own view of a store (what it last ran
    there), and a gauge in a worker's file holds what that worker last wrote, stale for a
    worker that answers nothing for a while; with ``--workers N`` a scrape shows the
    answering worker's view, as ``/health`` does. ``stores()``: project id → its store's
    health, asked at each scrape (the projects served then)."""

    def __init__(self, stores: Callable[[], Mapping[str, StoreHealth]]):
        self.stores = stores

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("tagalign_feedback_store_up", "1 while the project's "
                               "feedback store works, 0 while it is unavailable or full",
                               labels=["project"])
        seen = GaugeMetricFamily("tagalign_feedback_store_last_reachable_timestamp_seconds",
                                 "When a statement last ran on the project's feedback "
                                 "store (Unix time)", labels=["project"])
        for pid, health in self.stores().items():
            up.add_metric([pid], 0.0 if health.down else 1.0)
            if (last := health.last_reachable) is not None:
                seen.add_metric([pid], last)
        yield up
        yield seen


class Metrics:
    """The metrics of one app serving ``projects`` (id → project); the service layer and the
    request middleware (`tagalign.serve.observe`) report to it."""

    def __init__(self, projects: Mapping[str, Project]):
        _follow_env()
        self.dir = multiprocess_dir()
        self.registry = CollectorRegistry()
        # multiprocess mode: values go to files only; `exposition` gathers all processes'
        reg = None if self.dir else self.registry
        self.requests = Counter(
            "tagalign_http_requests", "HTTP requests answered",
            ["route", "method", "status", "project"], registry=reg)
        self.latency = Histogram(
            "tagalign_http_request_duration_seconds", "Time from request to the end of "
            "the answer", ["route", "method", "project"], buckets=LATENCY_BUCKETS,
            registry=reg)
        self.errors = Counter(
            "tagalign_errors", "Answers with a status of 400 or more",
            ["status", "route"], registry=reg)
        self.records = Counter(
            "tagalign_records", "Records suggested for", ["project"], registry=reg)
        self.suggestions = Counter(
            "tagalign_suggestions", "Subjects returned", ["project"], registry=reg)
        self.learn = Counter(
            "tagalign_learn", "Learn requests by outcome (" + ", ".join(LEARN_OUTCOMES) + ")",
            ["project", "outcome"], registry=reg)
        self.learn_failures = Counter(
            "tagalign_learn_failures", "Learn requests that stored nothing because the "
            "feedback store failed, by reason (" + ", ".join(LEARN_FAILURES) + ")",
            ["project", "reason"], registry=reg)
        self.recall = Histogram(
            "tagalign_quality_recall_estimate", "Estimated recall of each record's list",
            ["project"], buckets=SHARE_BUCKETS, registry=reg)
        self.precision = Histogram(
            "tagalign_quality_precision_estimate", "Estimated precision of each record's "
            "list", ["project"], buckets=SHARE_BUCKETS, registry=reg)
        # gauges of several workers: the largest among the live ones ("livemax"). For the
        # load time that is the slowest worker's latest load; for the model's info it is 1
        # while any live worker serves that version, 0 once all have moved on (a worker
        # whose reload failed keeps showing its old version). Dead workers drop out when
        # the supervisor calls `worker_exited`.
        self.load_seconds = Gauge(
            "tagalign_model_load_seconds", "Seconds the latest load of the model took",
            ["project"], multiprocess_mode="livemax", registry=reg)
        self.model_info = Gauge(
            "tagalign_model_info", "1 for the model version served (manifest hash), 0 for "
            "one served before", ["project", "version", "trained_at"],
            multiprocess_mode="livemax", registry=reg)
        self.reloads = Counter(
            "tagalign_model_reload", "Model reloads by outcome (ok, failed)",
            ["project", "outcome"], registry=reg)
        self._served: dict[str, tuple[str, str]] = {}
        self._stores: StoreGauges | None = None
        for pid, proj in projects.items():
            version = model_version(proj)
            if proj.is_trained and version["version"]:
                self._show_model(pid, proj.load_seconds, version["version"],
                                 version["trained_at"] or "")

    # -- what the middleware and the service report ------------------------------------
    def request(self, route: str, method: str, status: int, project: str,
                seconds: float) -> None:
        self.requests.labels(route, method, str(status), project).inc()
        self.latency.labels(route, method, project).observe(seconds)
        if status >= 400:
            self.errors.labels(str(status), route).inc()

    def suggested(self, project: str, tagged: Sequence[Tagged]) -> None:
        self.records.labels(project).inc(len(tagged))
        self.suggestions.labels(project).inc(sum(len(t.suggestions) for t in tagged))
        recall, precision = self.recall.labels(project), self.precision.labels(project)
        for t in tagged:
            if t.quality is not None:
                recall.observe(float(t.quality.recall))
                precision.observe(float(t.quality.precision))

    def learned(self, project: str, outcome: str) -> None:
        self.learn.labels(project, outcome).inc()

    def learn_failed(self, project: str, reason: str) -> None:
        self.learn_failures.labels(project, reason).inc()

    # -- models (the reload helper calls these) ----------------------------------------
    def model_loaded(self, project_id: str, seconds: float | None, version: str,
                     trained_at: str) -> None:
        """A reload of ``project_id`` succeeded: its load time, the version now served
        (`tagalign.project.model_version`) and one more ``ok`` reload."""
        self._show_model(project_id, seconds, version, trained_at)
        self.reloads.labels(project_id, "ok").inc()

    def model_load_failed(self, project_id: str) -> None:
        """A reload of ``project_id`` failed (the old model is still served)."""
        self.reloads.labels(project_id, "failed").inc()

    def _show_model(self, project_id: str, seconds: float | None, version: str,
                    trained_at: str) -> None:
        if seconds is not None:
            self.load_seconds.labels(project_id).set(seconds)
        old = self._served.get(project_id)
        if old is not None and old != (version, trained_at):
            # set to 0, not removed: in multiprocess mode a removed series stays in the
            # worker's file with its last value
            self.model_info.labels(project_id, *old).set(0)
        self.model_info.labels(project_id, version, trained_at).set(1)
        self._served[project_id] = (version, trained_at)

    # -- the feedback stores (the app names them once its service exists) --------------
    def watch_stores(self, stores: Callable[[], Mapping[str, StoreHealth]]) -> None:
        """Show the stores' state at each scrape (`StoreGauges`)."""
        self._stores = StoreGauges(stores)
        if not self.dir:
            self.registry.register(self._stores)

    # -- GET /metrics ------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The text format of all metrics (of all workers in multiprocess mode)."""
        if not self.dir:
            return generate_latest(self.registry)
        registry = CollectorRegistry()  # per scrape, as prometheus_client's guide does
        multiprocess.MultiProcessCollector(registry, path=self.dir)
        if self._stores is not None:  # this process's view, not the workers' files
            registry.register(self._stores)
        return generate_latest(registry)


class NoMetrics:
    """`Metrics` turned off (``tagalign serve --no-metrics``): the same calls, no work."""

    def request(self, *args, **kwargs) -> None:
        pass

    suggested = learned = learn_failed = model_loaded = model_load_failed = request
    watch_stores = request

    def exposition(self) -> bytes:
        return b""


__all__ = ["CONTENT_TYPE", "LEARN_FAILURES", "LEARN_OUTCOMES", "MULTIPROC_ENV", "Metrics",
           "NoMetrics", "StoreGauges", "WorkerRestarts", "multiprocess_dir",
           "prepare_multiprocess_dir", "worker_exited"]
