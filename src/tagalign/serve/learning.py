"""Learned records reach every model that serves a project: each worker's, and a reloaded
one's.

The feedback store is the one record of what was learned. A learn request stores its
decisions, then its worker *catches up*: it reads the rows stored after the last one it
applied (its own and any other worker's, `FeedbackStore.learned_since`) and teaches them
to the project in row order, each record's latest decision replacing the earlier ones (as
`Project.learn` does within one request). With several worker processes, each also
catches up before a suggest on a project that may learn, so a record learned through one
worker is used by the next request to any worker: one indexed query per suggest, which
finds nothing most of the time. A reloaded model learns every row stored since the server
started before it serves (`replay`), so a reload loses nothing learned.

"Since the server started" is the highest row id when it started (`start`): rows stored
before were either in the training data of the model or, as before workers existed,
wait for the next ``tagalign train --feedback``. A worker that starts again after a crash
replays from the same row, so it serves what its siblings serve. A store that was away
when the server started has its start row found when this process first reaches it, and
always before this process stores anything (`started`); with several workers the first
to reach it writes it where the others read it (`tagalign.serve.workers.Workers.start_row`),
so they agree, and every row the server stores is after it.

A store that fails (a full disk, a database gone: `tagalign.feedback.faults`) fails the
learn requests that write to it; a suggest does not wait for it.

Row ids become visible in their order (SQLite has one writer; on PostgreSQL,
`FeedbackStore.add` takes a lock that orders writers), so "after the last row applied"
misses nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from tagalign.feedback import StoreFault
from tagalign.project import Project
from tagalign.records import Record

log = logging.getLogger(__name__)


class LearnedRows(Protocol):
    """What catching up reads from a store (`FeedbackStore` or `ServedStores`)."""

    def last_id(self, project: str) -> int: ...

    def learned_since(self, project: str, after: int) -> tuple[list[Record], int]: ...


#: the row a server started after, for a project id and a reader of the store's last row
StartRow = Callable[[str, Callable[[], int]], int]


def learns(project: Project) -> bool:
    """Whether a project's model takes learned records at all (trained and not mapped)."""
    return project.is_trained and not project.mmap


class Learning:
    """Per served project id: the store row the server started after (``start``) and the
    last row its model applied. ``start_row(project_id, last_row)``: the row the server
    started after, given a reader of the store's last row now (default: that row; raises
    `StoreFault` while the store is away, then it is found later: `started`). ``shared``:
    other processes learn into the same store (several workers), so a suggest catches up
    first (`before_suggest`)."""

    def __init__(self, store: LearnedRows, project_ids: Iterable[str],
                 start_row: StartRow | None = None, *, shared: bool = False):
        self.store = store
        self.shared = shared
        self._start_row: StartRow = start_row or (lambda _pid, last_row: last_row())
        ids = list(project_ids)
        self.start: dict[str, int] = {}
        self.applied: dict[str, int] = {}
        #: whether the project's model learned online the last time it was taught
        self.online: dict[str, bool] = dict.fromkeys(ids, False)
        self._locks = {pid: threading.Lock() for pid in ids}
        self._starting = threading.Lock()
        #: projects whose model was reloaded while the store was away: they learn what
        #: was stored since the start at their next catch-up (`replay`)
        self.behind: set[str] = set()
        for pid in ids:
            with contextlib.suppress(StoreFault):  # away: found at its first reach
                self.started(pid)

    def started(self, project_id: str) -> int:
        """The row the server started after for a project, found now if it is not known
        yet (its store was away): raises `StoreFault` while the store is away. Asked
        before this process stores anything, so what it stores is after it."""
        if project_id in self.start:  # known: no lock (a store being reached holds it)
            return self.start[project_id]
        with self._starting:
            if project_id not in self.start:
                row = self._start_row(project_id, lambda: self.store.last_id(project_id))
                self.start[project_id] = self.applied[project_id] = row
            return self.start[project_id]

    def lock(self, project_id: str) -> threading.Lock:
        """Held while a project's model is taught or swapped for a reloaded one."""
        return self._locks[project_id]

    def catch_up(self, project_id: str, current: Callable[[], Project]
                 ) -> tuple[list[Record], bool]:
        """Teach the project now serving (``current()``, asked under the lock, so a model
        swapped in meanwhile is the one taught) the rows stored since the last it applied;
        ``(records taught, whether the model learns online)``."""
        self.started(project_id)
        with self._locks[project_id]:
            records, last = self.store.learned_since(project_id, self.applied[project_id])
            if records:
                self.online[project_id] = self._teach(current(), records)
            self.applied[project_id] = last
            self.behind.discard(project_id)
            return records, self.online[project_id]

    def before_suggest(self, project_id: str, project: Project,
                       current: Callable[[], Project]) -> list[Record]:
        """With ``shared`` learning, or a model reloaded while the store was away
        (``behind``), catch up a project that may learn; else nothing. A
        store that cannot be read (`StoreFault`: it is down, the log has said so) does not
        stop a suggest: the model answers as it is and catches up once the store is back."""
        if (not (self.shared or project_id in self.behind) or not project.allow_learn
                or not learns(project)):
            return []
        try:
            return self.catch_up(project_id, current)[0]
        except StoreFault:
            return []

    def replay(self, project_id: str, new: Project, swap: Callable[[], None]) -> int:
        """Teach a reloaded model every row since the server started, then ``swap`` it in
        while no other row can be applied in between; returns the records taught. The bulk
        is taught before taking the lock (a suggest waiting to catch up is not held up by
        it), the rows stored meanwhile under it.

        A store that cannot be read (`StoreFault`: away, the log has said so) does not
        refuse the reload: the new model is swapped in untaught and learns every row since
        the start at its next catch-up, before a suggest or a learn, once the store answers
        (meanwhile it suggests without what was learned since the start)."""
        try:
            records, upto = self.store.learned_since(project_id, self.started(project_id))
        except StoreFault:
            return self._swap_behind(project_id, swap)
        online = self._teach(new, records) if records else None
        with self._locks[project_id]:
            try:
                more, last = self.store.learned_since(project_id, upto)
            except StoreFault:
                more, last = [], None
            if more:
                online = self._teach(new, more)
            swap()
            if last is None:  # taught up to ``upto``; the rest at the next catch-up
                self.behind.add(project_id)
                last = upto
            self.applied[project_id] = last
            if online is not None:
                self.online[project_id] = online
            return len({r.id for r in [*records, *more]})

    def _swap_behind(self, project_id: str, swap: Callable[[], None]) -> int:
        log.warning("project %s: reloaded while its feedback store is away; the new model "
                    "learns what was stored since the start once the store answers",
                    project_id)
        with self._locks[project_id]:
            swap()
            self.behind.add(project_id)
            if project_id in self.start:
                self.applied[project_id] = self.start[project_id]
        return 0

    @staticmethod
    def _teach(project: Project, records: Sequence[Record]) -> bool:
        return learns(project) and project.learn(records)


__all__ = ["LearnedRows", "Learning", "StartRow", "learns"]
