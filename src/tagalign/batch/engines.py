"""Where shards run: `local` (this process) or `ray` (Ray Data actors, one machine or a
cluster). Both call the same `ShardWorker`, so their output is the same record for record,
and both let a shard's error reach the caller as the shard raised it (`worker_error`): a
full disk is the same `OSError` from a Ray worker as from this process.

Ray is imported only inside `RayEngine`; ``import tagalign`` and the CLI never need it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from tagalign.batch.inputs import Shard
from tagalign.batch.tasks import ShardWorker
from tagalign.errors import MissingExtraError, TagalignError
from tagalign.registry import Registry
from tagalign.runtime import Runtime

ENGINES: Registry[type[Engine]] = Registry("engine")
OnDone = Callable[[dict[str, Any]], None]
#: Object store of a Ray instance started here: small machines (2 cores, a small /dev/shm)
#: and CI fail with Ray's default of 30% of RAM. Shards travel as descriptors (the workers
#: read their input themselves), so little goes through the store.
DEFAULT_OBJECT_STORE_MB = 256


class EngineError(TagalignError):
    """An engine cannot start or a run failed as a whole (finished shards are kept)."""


register_engine = ENGINES.register


def get_engine(name: str, **kw: Any) -> Engine:
    return ENGINES.lookup(name)(**kw)


class Engine(ABC):
    name: ClassVar[str]
    #: Seconds spent starting the engine (Ray start-up) and its workers, filled by `run`.
    startup_s: float = 0.0
    workers: int = 1

    @abstractmethod
    def run(self, shards: Sequence[Shard], spec: dict[str, Any], out: str,
            on_done: OnDone) -> None:
        """Process every shard; call ``on_done(summary)`` as each one finishes."""

    def planned_workers(self) -> int:
        """Workers a run will likely use, known before starting (sizes the shards)."""
        return 1


@register_engine
class LocalEngine(Engine):
    """Shards one after another in this process (the task loaded once)."""

    name = "local"

    def __init__(self, **_: Any):
        self.workers = 1

    def run(self, shards: Sequence[Shard], spec: dict[str, Any], out: str,
            on_done: OnDone) -> None:
        t0 = time.perf_counter()
        worker = ShardWorker(spec, out)
        self.startup_s = time.perf_counter() - t0
        for shard in shards:
            on_done(worker.run(shard))


class RayShardActor:
    """The callable class of ``map_batches``: the task is loaded once per actor.

    A shard that fails with an `OSError` (a full disk) or a `TagalignError` is answered
    with its error (``error``: the exception, pickled as Ray sends any value) instead of
    raising it: rows reach the driver in the order shards end, so every shard that
    finished before it is in the manifest when the driver raises the error; a raised one
    would overtake finished shards still on their way (measured: both shards that had
    finished were missing from the manifest of a run stopped by a full disk)."""

    def __init__(self, spec: dict[str, Any], out: str, threads: int = 1):
        Runtime(threads=threads).apply()  # this worker process's start: pin its libraries
        # the task's runtime takes the same share (`tagalign.batch.tasks.worker_threads`)
        self.worker = ShardWorker({**spec, "threads": threads}, out)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        done, failed = [], []
        for s in batch["shard"]:
            try:
                done.append(json.dumps(self.worker.run(Shard.from_json(json.loads(s)))))
                failed.append(b"")
            except (OSError, TagalignError) as exc:
                done.append("")
                failed.append(pickle.dumps(exc))
        return {"summary": np.array(done, dtype=object),
                "error": np.array(failed, dtype=object)}


def _quiet_ray(ray: Any) -> None:
    """Our own progress display replaces Ray's bars and execution logs."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.enable_operator_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.enable_auto_log_stats = False
    ctx.verbose_stats_logs = False
    # A failed shard fails the run (the manifest keeps what finished; a rerun redoes it):
    # records are never dropped by skipping blocks.
    ctx.max_errored_blocks = 0
    # the shard's own error, not Ray Data's UserCodeException (which drops it in transit):
    # the driver raises it as it is (`worker_error`)
    ctx.raise_original_map_exception = True
    for name in ("ray", "ray.data", "ray._private"):
        logging.getLogger(name).setLevel(logging.ERROR)


#: What Ray's C++ core prints when it reads ``RAY_BACKEND_LOG_LEVEL`` (our own setting)
LEVEL_NOTICE = b"Set ray log level from environment variable"


@contextlib.contextmanager
def _without_level_notice() -> Iterator[None]:
    """Everything written to file descriptor 2 meanwhile, except Ray's notice that it read
    the log level we set: C++ writes to the descriptor, past ``sys.stderr``, so it is
    caught there (in a temporary file) and passed on once the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = b"".join(line for line in tmp if LEVEL_NOTICE not in line)
            if kept:
                os.write(2, kept)


@register_engine
class RayEngine(Engine):
    """Ray Data: ``map_batches`` over shard descriptors with an `ActorPoolStrategy` of N.

    A worker process that dies (killed, out of memory, its node lost) is restarted and its
    shard run again from the start by Ray Data (its actors' ``max_restarts`` and
    ``max_task_retries`` are -1: without limit); a shard's files are renamed into place
    only once complete, so the output holds each record once. An error a shard raises is
    not retried: it stops the run (`worker_error`).

    ``address=None`` (and no ``RAY_ADDRESS``) starts Ray in this process with
    ``object_store_mb`` of object store; ``"auto"`` or ``ray://host:10001`` joins a running
    cluster. An already initialised Ray (a test fixture, a notebook) is used as it is.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_workers: int | None = None,
                 object_store_mb: int = DEFAULT_OBJECT_STORE_MB,
                 threads_per_worker: int | None = None, **_: Any):
        try:  # an extra (`tagalign[ray]`); the core install and `import tagalign` never need it
            import ray  # noqa: F401
            import ray.data  # noqa: F401
        except ImportError as exc:
            raise MissingExtraError("--engine ray", "Ray", "ray") from exc
        self.address = address
        self.num_workers = num_workers
        self.object_store_mb = object_store_mb
        self.threads_per_worker = threads_per_worker

    def planned_workers(self) -> int:
        """``num_workers``, else this machine's CPUs (a cluster's are known only once
        joined; shards are then sized for this machine)."""
        return self.num_workers or os.cpu_count() or 1

    def start(self) -> float:
        """Start (or join) Ray now; returns the seconds it took (0 if it was running)."""
        t0 = time.perf_counter()
        self._init()
        return time.perf_counter() - t0

    def _init(self) -> Any:
        import ray

        # Ray's C++ core logs warnings meant for Ray developers (e.g. about actor restarts
        # of Ray Data's own map workers) straight to stderr; errors still reach the user
        # as exceptions.
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "logging_level": logging.ERROR}
            # RAY_ADDRESS is Ray's own (ray.init joins the cluster it names): without it
            # and without --address a Ray starts here, sized to this machine
            if self.address is None and not os.environ.get("RAY_ADDRESS"):
                kw.update(num_cpus=os.cpu_count() or 1,
                          object_store_memory=self.object_store_mb * 1024 * 1024)
            else:
                kw["address"] = self.address
            try:
                with _without_level_notice():
                    ray.init(**kw)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise EngineError(f"cannot start or reach Ray ({self.address or 'local'}): "
                                  f"{exc}") from exc
        _quiet_ray(ray)
        return ray

    def run(self, shards: Sequence[Shard], spec: dict[str, Any], out: str,
            on_done: OnDone) -> None:
        t0 = time.perf_counter()
        ray = self._init()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, min(self.num_workers or cpus, len(shards) or 1))
        # the machine's CPUs shared out: 1 worker on 2 cores gets 2 threads, 2 workers 1 each
        threads = self.threads_per_worker or max(1, cpus // self.workers)
        self.startup_s = time.perf_counter() - t0
        if not shards:
            return
        ds = ray.data.from_items([{"shard": json.dumps(s.to_json())} for s in shards],
                                 override_num_blocks=len(shards))
        ds = ds.map_batches(
            RayShardActor, fn_constructor_kwargs={"spec": spec, "out": out,
                                                  "threads": threads},
            compute=ray.data.ActorPoolStrategy(size=self.workers), batch_size=1,
            batch_format="numpy", num_cpus=threads)
        rows = iter(ds.iter_rows())
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except Exception as exc:  # Ray wraps worker errors in its own types
                raised = worker_error(exc)
                if raised is not None:  # raised as the local engine would (its CLI line)
                    raise raised from exc
                raise EngineError("Ray run failed: "
                                  f"{str(exc).strip().splitlines()[-1]}") from exc
            if row["error"]:  # the shard's error, the shards that ended before it recorded
                # pickled by our own worker, as Ray pickles everything it sends: nothing from
                # outside is unpickled here (no file, no archive)
                raise pickle.loads(row["error"])
            on_done(json.loads(row["summary"]))


def worker_error(exc: BaseException) -> OSError | TagalignError | None:
    """The `OSError` or `TagalignError` a shard (or a worker loading its task) raised, out
    of the exceptions Ray wraps it in: ``exc`` itself when it is one and no Ray wrapper (a
    plain `OSError`, as the local engine raises), else the first found down the chain
    (``cause``, which a Ray task error keeps the worker's exception in, else
    ``__cause__``); None when there is none (a worker that died, Ray's own failure)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        wrapper = type(current).__module__.split(".")[0] == "ray"
        if isinstance(current, (OSError, TagalignError)) and not wrapper:
            return current
        cause = getattr(current, "cause", None) if wrapper else None
        current = cause if isinstance(cause, BaseException) else current.__cause__
    return None
