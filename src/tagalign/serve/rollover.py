"""A model swap for preloaded workers (``serve --workers N``, preloaded by default): the
supervisor loads the new model, then replaces the workers one at a time with workers forked
from it.

Preloaded workers share the supervisor's copy of the models (`tagalign.serve.factory`'s
``preload``). A worker that reloaded in its own process would hold a copy of its own, and
the supervisor's old one would stay in memory: after one swap the server would take more
memory than workers that never shared. So on SIGHUP the supervisor reloads the models whose
folders changed, in a thread while it goes on watching its workers (``refresh``), and then,
one worker at a time, forks a new worker, waits until it serves, and stops the old one
gracefully (it finishes its requests in flight). The new and the old worker accept on the
same socket meanwhile, so no connection is refused and no request fails; the other workers
serve on. A model that fails to load changes nothing: the old one keeps serving, and the
supervisor says why in its log. The supervisor reads each changed folder whole, as a
worker's reload does: a `tagalign download` swapping it meanwhile waits for the load, and
a load waits for a swap under way (`tagalign.serve.factory.refresh_preloaded`,
`tagalign.shipping.swap.read_whole`).

Forks happen only in the supervisor's main thread and never while the loading thread runs
(a fork copies locks other threads hold, held forever in the child).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tagalign.errors import TagalignError

log = logging.getLogger(__name__)


class Loader(threading.Thread):
    """``refresh()`` in a thread: its result, or False when it raised (logged)."""

    def __init__(self, refresh: Callable[[], bool]):
        super().__init__(name="tagalign-refresh", daemon=True)
        self.refresh = refresh
        self.changed = False

    def run(self) -> None:
        try:
            self.changed = bool(self.refresh())
        except TagalignError as exc:  # a model refused on purpose: its message says why
            log.error("the new models did not load; the workers keep the old ones: %s", exc)
            self.changed = False
        except Exception:  # a model file damaged in a way no check foresaw: the traceback
            log.exception("the new models did not load; the workers keep the old ones")
            self.changed = False


class Rollover:
    """The swap's steps, one per tick of the supervisor's loop (`step`). ``spawn(slot)``
    starts a worker for slot ``slot``; ``ready(process)`` tells without waiting whether it
    serves; ``retire(process)`` stops one gracefully; ``reap()`` collects stopped ones."""

    def __init__(self, refresh: Callable[[], bool], spawn: Callable[[int], Any],
                 ready: Callable[[Any], bool], retire: Callable[[Any], None],
                 ready_timeout: float):
        self.refresh = refresh
        self.spawn = spawn
        self.ready = ready
        self.retire = retire
        self.ready_timeout = ready_timeout
        self.requested = False
        self.loader: Loader | None = None
        self.slots: list[int] = []  # slots still serving the old models
        self.incoming: tuple[int, Any, float] | None = None  # slot, process, started

    @property
    def busy(self) -> bool:
        return self.loader is not None or bool(self.slots) or self.incoming is not None

    def request(self) -> None:
        """A SIGHUP: reload (once the swap under way, if any, has finished)."""
        self.requested = True

    def step(self, processes: list[Any]) -> None:
        """One step: start loading, or collect the load, or bring one new worker in."""
        if self.loader is not None:
            if self.loader.is_alive():
                return
            changed, self.loader = self.loader.changed, None
            if changed:
                self.slots = list(range(len(processes)))
                log.info("new models loaded; replacing %d workers one at a time", len(processes))
            else:
                log.info("SIGHUP: no model changed")
        if self.incoming is None and not self.slots:
            if self.requested:
                self.requested = False
                self.loader = Loader(self.refresh)
                self.loader.start()
            return
        if self.incoming is None:
            slot = self.slots.pop(0)
            if slot < len(processes):  # a worker fewer since (SIGTTOU)
                self.incoming = (slot, self.spawn(slot), time.monotonic())
            return
        slot, process, started = self.incoming
        if self.ready(process):
            old, processes[slot] = processes[slot], process
            self.incoming = None
            self.retire(old)
            log.info("worker %s serves the new models in place of %s", process.pid, old.pid)
        elif not process.process.is_alive() or \
                time.monotonic() - started > self.ready_timeout:
            log.error("new worker %s did not start; the old workers keep serving",
                      process.pid)
            self.retire(process)
            self.incoming, self.slots = None, []

    def pending(self) -> list[Any]:
        """A new worker not serving yet (to stop with the others at the end)."""
        return [self.incoming[1]] if self.incoming else []


__all__ = ["Loader", "Rollover"]
