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

A server's store is also tried in the background while it is down (``probe``: a thread of
its own, after 1 s, then waiting twice as long each time up to `PROBE_MAX` s), so an outage
ends without a request to notice it, and a store that was away when the server started
opens once it answers. An outage ends at a *write* that succeeds (a learn's or the probe's):
on a full disk reads may work while writes fail, so a read says only that the store answers
(``last_reachable``).
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
#: seconds before the first background try of a store that is down, and the most between
#: two (each waits twice as long as the one before)
PROBE_FIRST, PROBE_MAX = 1.0, 30.0


class StoreHealth:
    """One store's outages in this process. ``where``: how the log names the store (its
    file, or its URL without the password); ``probe``: a write that raises while the store
    is down, tried in the background during an outage (a server's store; none: the next
    write notices the end); ``quiet``: log nothing (a store only looked at, as a server's
    supervisor does before its workers start: they each log their own)."""

    def __init__(self, where: str, probe: Callable[[], object] | None = None,
                 quiet: bool = False):
        self.where = where
        self.probe = probe
        self.quiet = quiet
        self._prober: threading.Thread | None = None
        self._closed = threading.Event()
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
            if self.probe is not None and self._prober is None and not self._closed.is_set():
                self._prober = threading.Thread(target=self._probing, daemon=True,
                                                name="feedback-store-probe")
                self._prober.start()
        if self.quiet:
            return
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
        if not self.quiet:
            log.info("feedback store %s works again after %.1f s (%d failed attempts "
                     "meanwhile)", self.where, seconds, failures)

    def _probing(self) -> None:
        """The background tries of an outage (``probe``), until one succeeds or the store
        is closed; a write that succeeded meanwhile ends the outage and the thread."""
        assert self.probe is not None
        pause = PROBE_FIRST
        while not self._closed.wait(pause):
            with self._lock:
                if self.down_since is None:
                    self._prober = None
                    return
            try:
                self.probe()
            except Exception as exc:  # a StoreFault (noted), or what the store logged
                log.debug("feedback store %s: still down (%s)", self.where, exc)
                pause = min(2 * pause, PROBE_MAX)
                continue
            self.ok()
            pause = PROBE_FIRST

    def close(self) -> None:
        """No more background tries (the store is closed)."""
        self._closed.set()

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
