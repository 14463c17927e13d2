"""What one serving process knows of its siblings: how many there are, where each says
which model versions it serves, and whom to ask to make them all reload.

Several workers (``tagalign serve --workers N``, `tagalign.serve.supervisor`) each load
their own models; a reload reaches them one after another. So that a client can see when
they differ, each worker writes a small JSON file into a folder the supervisor made
(``STATE_DIR/PID.json``: per project id, the version it serves and since when), after
start and after every reload; ``GET /tagalign/v1/projects/{id}`` lists every worker's.
The supervisor deletes the file of a worker that ended.

The same folder holds the feedback row the server started after for a project whose store
was away when the server started (`Workers.start_row`): the first worker to reach the store
writes it there, every other (and one started later) reads it.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import logging
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagalign.io import write_json_atomic

log = logging.getLogger(__name__)

#: the state folder's file of the start rows found by the workers (`Workers.start_row`),
#: its lock beside it; not ``*.json``, which are the workers' state files
START_ROWS = "start-rows"

def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Workers:
    """This process's place among the server's workers.

    ``count``: worker processes serving the port (1: this process alone, no supervisor);
    ``state_dir``: the folder of their state files (None: only this process is reported);
    ``supervisor``: the supervisor's pid, signalled to make every worker reload;
    ``learned_after``: per project id, the feedback row the server started after
    (`tagalign.serve.learning`; missing: the store's last row when the app is made)."""

    count: int = 1
    state_dir: Path | None = None
    supervisor: int | None = None
    learned_after: Mapping[str, int] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """Other processes learn into the same stores and serve the same projects."""
        return self.count > 1

    def reload_siblings(self) -> bool:
        """Ask the supervisor to send every worker SIGHUP (each reloads what changed; this
        one finds nothing new). False when there is no supervisor to ask (one process, or
        the supervisor is gone and this worker has another parent)."""
        if self.supervisor is None or os.getppid() != self.supervisor:
            return False
        os.kill(self.supervisor, signal.SIGHUP)
        return True

    def start_row(self, project_id: str, last_row: Callable[[], int]) -> int:
        """The feedback row the server started after for ``project_id``
        (`tagalign.serve.learning`): the supervisor's (``learned_after``), else, for a store
        that was away when the server started, the store's last row when the first worker
        reached it (``last_row()``, which raises while the store is away). That worker
        writes it into the state folder under a lock, so every worker reads the one row
        and none has stored anything before it: every row the server stores is after it.
        One process alone: ``last_row()``."""
        if project_id in self.learned_after:
            return self.learned_after[project_id]
        if self.state_dir is None:
            return last_row()
        path = self.state_dir / START_ROWS
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
            rows = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
            if project_id not in rows:
                rows[project_id] = last_row()
                write_json_atomic(path, rows)
            return int(rows[project_id])

    # -- state files -----------------------------------------------------------------
    def write_state(self, projects: Mapping[str, dict[str, Any]]) -> None:
        """This worker's state: project id → ``{"version", "trained_at", "loaded_at"}``."""
        if self.state_dir is None:
            return
        try:
            write_json_atomic(self.state_dir / f"{os.getpid()}.json",
                              {"pid": os.getpid(), "updated": now(), "projects": projects})
        except OSError as exc:  # only what GET shows is stale: never fail a reload for it
            log.warning("could not write the worker state file: %s", exc)

    def states(self) -> list[dict[str, Any]]:
        """Every worker's state, by pid (only this process's without a state folder)."""
        if self.state_dir is None:
            return []
        out = []
        for path in sorted(self.state_dir.glob("*.json")):
            try:
                out.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):  # a worker gone meanwhile
                continue
        return sorted(out, key=lambda s: s.get("pid", 0))


def remove_state(state_dir: Path, pid: int) -> None:
    """The state file of a worker that ended (the supervisor's part)."""
    (state_dir / f"{pid}.json").unlink(missing_ok=True)


__all__ = ["Workers", "now", "remove_state"]
