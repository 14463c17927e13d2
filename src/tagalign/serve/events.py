"""What a server tells observers (metrics, tests): models loaded or refused, workers gone.

Plain lists of callbacks, appended to once when a process starts (before it serves), so
the serving code knows nothing of who listens. Prometheus metrics, for one, subscribe
with ``events.on_model_loaded.append(metrics.model_loaded)`` and so on: each list's
callbacks take the arguments its `emit` function passes. A callback that raises is
logged and skipped: an observer never breaks a reload or a worker's restart.

Where each is emitted:

- `model_loaded(project_id, seconds, version, trained_at)`: in a worker, a project's
  model was loaded at start or by a reload (`tagalign.serve.reload`); ``version`` and
  ``trained_at`` as `tagalign.project.ModelVersion` has them;
- `model_load_failed(project_id)`: a reload was refused, the old model keeps serving;
- `multiprocess_dir(path)`: in the supervisor, before the workers start: the folder set
  as ``PROMETHEUS_MULTIPROC_DIR`` for them (`tagalign.serve.supervisor`);
- `worker_exited(pid)`: in the supervisor, a worker process ended (stopped, crashed or
  killed as hung).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

on_model_loaded: list[Callable[[str, float, str, str | None], Any]] = []
on_model_load_failed: list[Callable[[str], Any]] = []
on_multiprocess_dir: list[Callable[[Path], Any]] = []
on_worker_exited: list[Callable[[int], Any]] = []


def _emit(callbacks: list[Callable[..., Any]], *args: Any) -> None:
    for callback in list(callbacks):
        try:
            callback(*args)
        except Exception:  # an observer's bug must not stop serving
            log.exception("event callback %r failed", callback)


def model_loaded(project_id: str, seconds: float, version: str,
                 trained_at: str | None) -> None:
    _emit(on_model_loaded, project_id, seconds, version, trained_at)


def model_load_failed(project_id: str) -> None:
    _emit(on_model_load_failed, project_id)


def multiprocess_dir(path: Path) -> None:
    _emit(on_multiprocess_dir, path)


def worker_exited(pid: int) -> None:
    _emit(on_worker_exited, pid)


__all__ = ["model_load_failed", "model_loaded", "multiprocess_dir", "on_model_load_failed",
           "on_model_loaded", "on_multiprocess_dir", "on_worker_exited", "worker_exited"]
