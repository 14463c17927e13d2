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

A store that is **wrong** rather than away is none of these: a URL of an unknown database
or without its driver, credentials the database refuses (PostgreSQL's class 28), a
database that is not tagalign's (`NotAStoreError`: a file that is no SQLite database, or
tables that are not a feedback store's), a schema from a newer tagalign (`NewerStoreError`).
Waiting does not mend it, so a server refuses to start with it (`WrongStoreError`, raised
as the store opens: `tagalign.feedback.store`), while one that is away starts and learns
once it answers.
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

#: SQLite's primary codes: full; busy, read-only, I/O error, cannot open; not a database
_SQLITE_FULL, _SQLITE_UNAVAILABLE, _SQLITE_NOTADB = 13, {5, 8, 10, 14}, 26
#: the extended I/O error of a shared-memory file that cannot grow: a full disk, met by a
#: new connection to a WAL store there (the running one's writes fail with SQLITE_FULL)
_SQLITE_IOERR_SHMSIZE = 4874
#: PostgreSQL error states of a database gone or going: connection exceptions (class 08),
#: admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
_PG_UNAVAILABLE = ("08", "57P01", "57P02", "57P03", "53300")
_PG_DISK_FULL = "53100"
#: what a PostgreSQL server says when it refuses a connection for its credentials or
#: names (class 28 invalid_authorization_specification, 3D000 invalid_catalog_name):
#: libpq gives no state for an error while connecting, only the server's message
_PG_REFUSED = ("authentication failed", "does not exist", "no pg_hba.conf entry",
               "permission denied for database")


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


class WrongStoreError(TagalignError):
    """The feedback store is wrong rather than away (the module docstring): waiting does
    not mend it, so a server does not start with it. The message names the store."""

    def opening(self, where: str) -> WrongStoreError:
        """The same error naming the store (``where``), as the store's opening raises it."""
        return type(self)(f"cannot open the feedback store {where}: {self}")


class NotAStoreError(WrongStoreError):
    """The database is not a feedback store: a file that is no SQLite database, or one
    whose tables are another program's."""


class NewerStoreError(WrongStoreError):
    """The store's schema was made by a newer tagalign than this one
    (`tagalign.feedback.schema.SCHEMA_VERSION`)."""


def wrong_store(exc: BaseException) -> WrongStoreError:
    """The `WrongStoreError` of a database's error on opening a store that is neither a full
    disk nor a database gone (`classify` said None): its first line, as the database said
    it (a wrong password, a database that does not exist, a file that is no database)."""
    first = next((str(e).strip().splitlines()[0] for e in _chain(exc)
                  if not hasattr(e, "orig") and str(e).strip()), type(exc).__name__)
    if any(isinstance(e, sqlite3.Error) and getattr(e, "sqlite_errorcode", 0) & 0xFF
           == _SQLITE_NOTADB for e in _chain(exc)):
        return NotAStoreError(f"not a feedback store ({first})")
    return WrongStoreError(first)


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
            extended = getattr(e, "sqlite_errorcode", 0)
            code = extended & 0xFF  # the primary code
            if code == _SQLITE_FULL or extended == _SQLITE_IOERR_SHMSIZE:
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
        if connecting and any(phrase in str(e) for phrase in _PG_REFUSED):
            return None  # the server refused us: its answer, though libpq gives no state
    # no answer from the database at all: refused, timed out, cut
    return UNAVAILABLE if disconnect or connecting else None


__all__ = ["CONNECT_TIMEOUT", "NO_SPACE", "RETRY_AFTER", "UNAVAILABLE", "NewerStoreError",
           "NotAStoreError", "StoreFault", "StoreFullError", "StoreUnavailableError",
           "WrongStoreError", "classify", "wrong_store"]
