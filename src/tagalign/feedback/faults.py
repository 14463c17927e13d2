"""What a feedback store does when its database fails: the disk fills up, or the database
goes away (a PostgreSQL restart, a stop, a network cut).

Both are told apart from the database's own error (`classify`) and raised as the package's
errors, so each API answers them with its status and a message a client can act on:

- **no space left** (SQLite's "database or disk is full", PostgreSQL's ``53100
  disk_full``, ``ENOSPC``): `StoreFullError`, HTTP 507 Insufficient Storage. The
  transaction was rolled back, nothing of the request is stored; writes work again once
  space is freed, without a restart.
- **unavailable** (the connection refused, closed by the server or lost; PostgreSQL
  shutting down or starting up; an SQLite file that cannot be opened or stays locked):
  `StoreUnavailableError`, HTTP 503 with ``Retry-After``. A write that failed before its
  COMMIT was sent (on connecting, or on a lost connection mid-transaction) is
  ``retryable``: tried again while a database restarts (`tagalign.feedback.health`). A
  failure *during* COMMIT is never repeated (it may have been stored): the client sees
  503, and sending the request again is safe (the latest decision per record is what
  counts).

How a store notices these errors, tries a write again and logs an outage:
`tagalign.feedback.health`.
"""

from __future__ import annotations

import sqlite3

from tagalign.errors import TagalignError, is_no_space

#: the reasons (also the label of `tagalign_learn_failures_total`)
NO_SPACE, UNAVAILABLE = "no_space", "unavailable"
#: seconds a 503 tells a client to wait before it tries again
RETRY_AFTER = 5
#: seconds PostgreSQL gets to accept a connection (unset, a host that drops packets would
#: hold a request for the kernel's TCP timeout, minutes)
CONNECT_TIMEOUT = 5

_SQLITE_FULL, _SQLITE_UNAVAILABLE = 13, {5, 10, 14}  # full; busy, I/O error, cannot open
#: PostgreSQL error states of a database gone or going: connection exceptions (class 08),
#: admin_shutdown, crash_shutdown, cannot_connect_now
_PG_UNAVAILABLE = ("08", "57P01", "57P02", "57P03")
_PG_DISK_FULL = "53100"


class StoreFault(TagalignError):
    """The feedback store failed for a reason outside the request (``reason``: `NO_SPACE`
    or `UNAVAILABLE`); nothing of the operation was stored. ``retryable``: it failed
    before anything could have been committed, so doing it again is safe."""

    reason = ""
    #: what failed, in a few words (the log's and `opening`'s)
    what = ""

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable

    def opening(self, where: str) -> StoreFault:
        """The same fault as a store's opening meets it (a server's start, a command): it
        names the store, as no client reads it."""
        return type(self)(f"cannot open the feedback store {where}: {self.what}")

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries."""
        return {}


class StoreFullError(StoreFault):
    """No space left where the feedback store writes (HTTP 507 Insufficient Storage)."""

    http_status = 507
    reason = NO_SPACE
    what = "no space left"

    def __init__(self, message: str = "no space left on the feedback store's disk: nothing "
                 "was stored; learning works again once space is freed", **kw):
        super().__init__(message, **kw)


class StoreUnavailableError(StoreFault):
    """The feedback store's database cannot be reached (HTTP 503, ``Retry-After``)."""

    http_status = 503
    reason = UNAVAILABLE
    what = "its database is unavailable"

    def __init__(self, message: str = "the feedback store's database is unavailable: "
                 f"nothing was stored; try again in {RETRY_AFTER} s", **kw):
        super().__init__(message, **kw)

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER)}


def _chain(exc: BaseException | None):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def classify(exc: BaseException, *, disconnect: bool = False,
             connecting: bool = False) -> str | None:
    """`NO_SPACE`, `UNAVAILABLE`, or None (another error: the caller's to raise) for a
    database error ``exc``; ``disconnect``: SQLAlchemy found the connection lost;
    ``connecting``: it failed while a connection was being opened."""
    for e in _chain(exc):
        if isinstance(e, OSError) and is_no_space(e):  # ENOSPC, EDQUOT: `tagalign.errors`
            return NO_SPACE
        if isinstance(e, sqlite3.Error):
            code = getattr(e, "sqlite_errorcode", 0) & 0xFF  # the primary code
            if code == _SQLITE_FULL:
                return NO_SPACE
            if code in _SQLITE_UNAVAILABLE:
                return UNAVAILABLE
            return None
        state = getattr(e, "sqlstate", None)  # psycopg
        if isinstance(state, str):
            if state == _PG_DISK_FULL:
                return NO_SPACE
            # another state is the database's answer (a wrong password, a missing table)
            return UNAVAILABLE if state.startswith(_PG_UNAVAILABLE) else None
    # no answer from the database at all: refused, timed out, cut
    return UNAVAILABLE if disconnect or connecting else None


__all__ = ["CONNECT_TIMEOUT", "NO_SPACE", "RETRY_AFTER", "UNAVAILABLE", "StoreFault",
           "StoreFullError", "StoreUnavailableError", "classify"]
