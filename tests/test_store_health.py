"""A feedback store's faults without a server (`tagalign.feedback.faults` and `.health`): an
SQLite file that may not grow raises `StoreFullError` and works again once it may; database
errors are told apart; writes are tried again only while that is safe; an outage is logged
once. (With a server, a full tmpfs and a stopped PostgreSQL: tests/test_store_faults.py.)"""

from __future__ import annotations

import logging
import sqlite3

import psycopg
import pytest
from sqlalchemy import event

from tagalign.feedback import Decision, FeedbackStore, sqlite_url
from tagalign.feedback.faults import (
    NO_SPACE,
    UNAVAILABLE,
    StoreFullError,
    StoreUnavailableError,
    classify,
)
from tagalign.feedback.health import StoreHealth
from tagalign.records import Record


class Logged(logging.Handler):
    """The records of `tagalign.feedback.health` (the CLI's handlers may keep them from
    the root logger, and so from caplog)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def levels(self) -> list[str]:
        return [r.levelname for r in self.records]


@pytest.fixture
def logged():
    logger = logging.getLogger("tagalign.feedback.health")
    handler, level = Logged(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def decision(i: int) -> list[Decision]:
    return [Decision(Record(id=f"r{i}", title="Pilze " * 200), ["4046076-9"])]


def test_a_full_sqlite_file_raises_store_full_logs_once_and_works_again(tmp_path, logged):
    """SQLite's own "database or disk is full" (SQLITE_FULL), made by a page limit."""
    store = FeedbackStore(sqlite_url(tmp_path / "feedback.sqlite"))
    limit = {"pages": 0}

    @event.listens_for(store.engine, "connect")
    def _limit(dbapi_conn, _record):
        if limit["pages"]:
            dbapi_conn.execute(f"PRAGMA max_page_count={limit['pages']}")

    store.add("p", decision(0))
    with store.engine.connect() as conn:
        limit["pages"] = conn.exec_driver_sql("PRAGMA page_count").scalar()
    store.engine.dispose()  # new connections, with the limit
    for i in range(1, 4):
        with pytest.raises(StoreFullError, match="no space left") as err:
            for k in range(50):  # until the file would need another page
                store.add("p", decision(100 * i + k))
        assert err.value.http_status == 507 and not err.value.retryable
    assert logged.levels() == ["WARNING"]
    assert "no space left" in logged.records[0].getMessage()
    assert str(tmp_path / "feedback.sqlite") in logged.records[0].getMessage()
    full = store.count("p")

    limit["pages"] = 0
    store.engine.dispose()
    store.add("p", decision(999))
    assert store.count("p") == full + 1
    assert logged.levels() == ["WARNING", "INFO"]
    assert "works again" in logged.records[1].getMessage()


def _sqlite_error(message: str, code: int) -> sqlite3.Error:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code  # as SQLite sets it
    return error


@pytest.mark.parametrize(("error", "disconnect", "connecting", "reason"), [
    (sqlite3.OperationalError("database or disk is full"), False, False, None),
    (OSError(28, "No space left on device"), False, False, NO_SPACE),
    (psycopg.errors.lookup("53100")("could not extend file"), False, False, NO_SPACE),
    (psycopg.errors.lookup("57P01")("terminating connection"), False, False, UNAVAILABLE),
    (psycopg.errors.lookup("57P03")("the database system is starting up"), False, True,
     UNAVAILABLE),
    (psycopg.OperationalError("connection refused"), False, True, UNAVAILABLE),
    (psycopg.OperationalError("server closed the connection"), True, False, UNAVAILABLE),
    (psycopg.errors.lookup("28P01")("password authentication failed"), False, True, None),
    # while connecting libpq gives no state: the server's refusal is told by its words
    (psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", '
                              'port 5432 failed: FATAL:  password authentication failed for '
                              'user "tagalign"'), False, True, None),
    (psycopg.OperationalError('connection failed: FATAL:  database "fb" does not exist'),
     False, True, None),
    (psycopg.errors.lookup("53300")("sorry, too many clients already"), False, True,
     UNAVAILABLE),
    (_sqlite_error("disk I/O error", 4874), False, False, NO_SPACE),  # SHMSIZE: a full disk
    (_sqlite_error("attempt to write a readonly database", 8), False, False, UNAVAILABLE),
    (_sqlite_error("file is not a database", 26), False, False, None),
    (psycopg.errors.lookup("42P01")("relation does not exist"), False, False, None),
])
def test_classify_tells_no_space_and_unavailable_from_other_errors(error, disconnect,
                                                                   connecting, reason):
    # a bare sqlite3 error without its code is no SQLITE_FULL: codes decide, not words
    assert classify(error, disconnect=disconnect, connecting=connecting) == reason


def test_writes_are_tried_again_only_when_nothing_can_have_been_committed(logged):
    health = StoreHealth("db")
    tries = []

    def flaky(fault):
        def write():
            tries.append(1)
            if len(tries) < 3:
                health.failed(fault, RuntimeError("connection refused"))
                raise fault
            return "done"
        return write

    assert health.retrying(flaky(StoreUnavailableError(retryable=True))) == "done"
    assert len(tries) == 3
    assert logged.levels() == ["WARNING", "INFO"]  # one outage, whatever the attempts
    tries.clear()
    with pytest.raises(StoreUnavailableError):  # a COMMIT cut off: maybe stored
        health.retrying(flaky(StoreUnavailableError(retryable=False)))
    assert len(tries) == 1
    assert StoreUnavailableError().headers == {"Retry-After": "5"}
