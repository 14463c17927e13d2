"""How a serving process is: each served project's model and feedback store, whether it
can suggest (readiness) and whether it learns — what ``/tagalign/v1/health`` (and
``/health/ready``), the project's ``learning`` field and the web page show.

Everything here is this process's view (with ``--workers N``, the answering worker's; all
workers serve the same models and share the stores): the model it serves, and its
feedback store's `tagalign.feedback.health.StoreHealth`, which follows the statements the
process ran on the store — it does not ask the store itself, so a health check never
waits for a database that is away.

- A **model** is ``ok`` when the project has a trained model loaded, else
  ``not_trained`` (its suggest answers 503 until it is trained and reloaded).
- A **feedback store** is ``ok``, ``unavailable`` (learns answer 503) or ``no_space``
  (507), the two since the outage began.
- A project is ``ok`` when both are, else ``degraded``; so is the server (`health`). An
  untrained project makes it degraded too: a client asking it for suggestions gets 503,
  and a health check says so rather than hiding one project behind the others.
- The server is **ready** (`readiness`) while it is not stopping and at least one
  project can suggest: a store that is away or full degrades learning only.
- A project **learns** (`learning`) ``on``; ``off`` when it may not (``allow_learn``
  not set, or served read-only with ``--mmap``); ``paused`` while its store is
  unavailable or full.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Iterable
from typing import Any

from tagalign.feedback.health import StoreHealth
from tagalign.project import Project

OK, DEGRADED, NOT_TRAINED = "ok", "degraded", "not_trained"
#: `learning` states
ON, OFF, PAUSED = "on", "off", "paused"


def _iso(wall: float | None) -> str | None:
    return None if wall is None else _dt.datetime.fromtimestamp(wall, _dt.UTC).isoformat(
        timespec="seconds")


def down_since(health: StoreHealth) -> float | None:
    """When the store's outage began (`time.time`), None while it works."""
    since = health.down_since  # read once: another thread may end the outage meanwhile
    return None if since is None else time.time() - (time.monotonic() - since)


def model_check(project: Project, loaded_at: str | None) -> dict[str, Any]:
    """The model a project serves: ``trained`` (a model is loaded: suggest answers), its
    version and training time (`tagalign.project.model_version`), when this process
    loaded it."""
    version = project.model_version if project.is_trained else None
    return {"status": OK if project.is_trained else NOT_TRAINED,
            "trained": project.is_trained,
            "version": version["version"] if version else None,
            "trained_at": version["trained_at"] if version else None,
            "loaded_at": loaded_at if project.is_trained else None}


def store_check(health: StoreHealth) -> dict[str, Any]:
    """A feedback store's state, since when (null while ``ok``) and when a statement last
    ran on it in this process (null: none yet)."""
    return {"status": health.state, "since": _iso(down_since(health)),
            "last_reachable": _iso(health.last_reachable)}


def learning(project: Project, health: StoreHealth) -> dict[str, Any]:
    """Whether learn requests to the project are taken now: ``state`` on, off or paused;
    ``reason`` for off (``allow_learn``, ``read_only``) and paused (the store's state,
    ``unavailable`` or ``no_space``), with ``since`` for paused."""
    if not project.allow_learn:
        return {"state": OFF, "reason": "allow_learn", "since": None}
    if project.mmap:
        return {"state": OFF, "reason": "read_only", "since": None}
    state = health.state
    if state != OK:
        return {"state": PAUSED, "reason": state, "since": _iso(down_since(health))}
    return {"state": ON, "reason": None, "since": None}


def project_check(project: Project, health: StoreHealth, loaded_at: str | None
                  ) -> dict[str, Any]:
    model, store = model_check(project, loaded_at), store_check(health)
    ok = model["status"] == OK and store["status"] == OK
    return {"status": OK if ok else DEGRADED, "model": model, "feedback_store": store}


def health(checks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``/health``'s answer for the projects' checks (id → `project_check`)."""
    ok = all(c["status"] == OK for c in checks.values())
    return {"status": OK if ok else DEGRADED, "projects": len(checks), "checks": checks}


def readiness(projects: Iterable[tuple[str, Project]], stopping: bool
              ) -> tuple[bool, dict[str, Any]]:
    """Whether the process is ready for traffic, and ``/health/ready``'s answer: each
    project's ``suggest`` (whether it can) and, when not ready, why."""
    can = {pid: proj.is_trained for pid, proj in projects}
    reason = None
    if stopping:
        reason = "the server is stopping (requests in flight finish, new ones go elsewhere)"
    elif not any(can.values()):
        reason = ("no project can suggest: " + (", ".join(
            f"{pid!r} is not trained" for pid in can) if can else "none is served"))
    return reason is None, {"status": "ready" if reason is None else "not_ready",
                            "reason": reason, "suggest": can}


__all__ = ["DEGRADED", "NOT_TRAINED", "OFF", "OK", "ON", "PAUSED", "down_since", "health",
           "learning", "model_check", "project_check", "readiness", "store_check"]
