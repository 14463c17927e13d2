"""A feedback store's outages as this process sees them, and its writes tried again while a
database restarts.

`watch` hooks a store's engine: a database error that means a full disk or a database gone
(`tagalign.feedback.faults.classify`) is raised as the package's `StoreFault` and noted in
the store's `StoreHealth`. A write that failed before its COMMIT was sent is tried again
within `RETRY_WINDOW` seconds of an outage's start (`StoreHealth.retrying`), so a restart of
a few seconds costs a learn some waiting, not an error; later in an outage a request is
tried once and fails at once.

The engine's pool checks a connection before lending it (``pool_pre_ping``) and SQLAlchemy
drops the whole pool on a lost connection, so the first request after the database is back
gets a fresh connection.

`StoreHealth` keeps one store's outages: the first failure of an outage logs one warning
(with the database's own message and where the store is), the first successful write after
it one line saying how long it lasted and how many attempts failed meanwhile; nothing per
request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Engine, ExceptionContext

from tagalign.feedback.faults import (
    NO_SPACE,
    UNAVAILABLE,
    StoreFault,
    StoreFullError,
    StoreUnavailableError,
    classify,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds from an outage's start during which a write is tried again (a restart)
RETRY_WINDOW = 2.0


class StoreHealth:
    """One store's outages in this process. ``where``: how the log names the store (its
    file, or its URL without the password)."""

    def __init__(self, where: str):
        self.where = where
        self.down_since: float | None = None
        self.reason: str | None = None
        self.failures = 0
        #: wall-clock time (`time.time`) the store last answered (None: not yet, in this
        #: process); what ``/health`` and ``tagalign_feedback_store_*`` report
        self.last_reachable: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self.down_since is not None

    @property
    def state(self) -> str:
        """``"ok"``, or why the store fails now: `NO_SPACE` or `UNAVAILABLE`."""
        if self.down_since is None or self.reason is None:
            return "ok"
        return self.reason

    def reachable(self) -> None:
        """The store answered (a read or a write)."""
        self.last_reachable = time.time()

    def failed(self, fault: StoreFault, cause: BaseException) -> None:
        """An operation failed with ``fault``: the first failure of an outage (or of
        another reason) logs one warning."""
        with self._lock:
            self.failures += 1
            if self.down_since is not None and self.reason == fault.reason:
                return
            self.down_since = self.down_since or time.monotonic()
            self.reason = fault.reason
        answer = ("learns answer 507 until space is freed" if fault.reason == NO_SPACE
                  else "learns answer 503 until it is back")
        log.warning("feedback store %s: %s (%s); %s", self.where, fault.what,
                    str(cause).strip().splitlines()[0] if str(cause).strip() else
                    type(cause).__name__, answer)

    def ok(self) -> None:
        """A write succeeded: an outage, if any, is over (one line says so)."""
        self.reachable()
        if self.down_since is None:
            return
        with self._lock:
            if self.down_since is None:
                return
            seconds, failures = time.monotonic() - self.down_since, self.failures
            self.down_since, self.reason, self.failures = None, None, 0
        log.info("feedback store %s works again after %.1f s (%d failed attempts "
                 "meanwhile)", self.where, seconds, failures)

    def retrying(self, write: Callable[[], T]) -> T:
        """``write()``, tried again while it fails with a retryable `StoreFault` and the
        outage is younger than `RETRY_WINDOW` seconds (waits 0.1 s, doubling to 1 s);
        marks the store working when it succeeds."""
        pause = 0.1
        while True:
            try:
                out = write()
            except StoreFault as exc:
                since = self.down_since or time.monotonic()
                if not exc.retryable or time.monotonic() + pause > since + RETRY_WINDOW:
                    raise
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
                continue
            self.ok()
            return out


def watch(engine: Engine, health: StoreHealth) -> None:
    """Raise the engine's database errors of a full disk or a database gone as
    `StoreFault`s, noting each in ``health``."""

    @event.listens_for(engine, "after_cursor_execute")
    def _answered(*_args: object) -> None:
        health.reachable()

    @event.listens_for(engine, "handle_error")
    def _fault(ctx: ExceptionContext) -> None:
        if ctx.is_pre_ping:  # the pool finds a dead connection and opens another
            return
        connecting = ctx.connection is None
        cause = ctx.original_exception
        reason = classify(cause, disconnect=ctx.is_disconnect, connecting=connecting)
        if reason is None:
            return
        # nothing can have been committed when the failure came on connecting or from a
        # statement (a COMMIT has no statement here): then the write may be tried again.
        # Not on SQLite: a file that cannot be opened or stays locked (after its busy
        # timeout) does not come back within seconds
        retryable = (reason == UNAVAILABLE and ctx.dialect.name != "sqlite"
                     and (connecting or ctx.statement is not None))
        fault: StoreFault = (StoreFullError(retryable=False) if reason == NO_SPACE
                             else StoreUnavailableError(retryable=retryable))
        health.failed(fault, cause)
        raise fault


__all__ = ["RETRY_WINDOW", "StoreHealth", "watch"]
