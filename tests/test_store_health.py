"""A feedback store's faults without a server (`tagalign.feedback.faults` and `.health`): an
SQLite file that may not grow raises `StoreFullError` and works again once it may; database
errors are told apart; writes are tried again only while that is safe; an outage is logged
once. Opening a store (issue 64): one that is away at start does not stop a server's store,
which opens by itself once it answers, tried in the background; one that is wrong (not a
feedback store, a newer schema, an unknown URL) is refused with one message; the schema's
version row; the workers of a server agree on the row learning starts after when the store
was away at start. (With a server, a full tmpfs and a stopped PostgreSQL:
tests/test_store_faults.py, tests/test_store_start.py.)"""

from __future__ import annotations

import logging
import sqlite3
import time

import psycopg
import pytest
from sqlalchemy import event, text

from tagalign.feedback import Decision, FeedbackStore, sqlite_url
from tagalign.feedback.faults import (
    NO_SPACE,
    UNAVAILABLE,
    NewerStoreError,
    NotAStoreError,
    StoreFullError,
    StoreUnavailableError,
    WrongStoreError,
    classify,
)
from tagalign.feedback.health import StoreHealth
from tagalign.feedback.schema import SCHEMA_VERSION
from tagalign.records import Record
from tagalign.serve.learning import Learning
from tagalign.serve.workers import Workers

T = 30  # seconds to wait for the background probe (it first tries after 1 s)


class Logged(logging.Handler):
    """The records of `tagalign.feedback.health` and `.store` (the CLI's handlers may keep
    them from the root logger, and so from caplog)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def levels(self) -> list[str]:
        return [r.levelname for r in self.records]


@pytest.fixture
def logged():
    loggers = [logging.getLogger(n) for n in ("tagalign.feedback.health",
                                              "tagalign.feedback.store")]
    handler, levels = Logged(), [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    yield handler
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


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


# -- opening a store (issue 64) ---------------------------------------------------------
def one(rid: str) -> list[Decision]:
    return [Decision(Record(id=rid, title="Pilze"), ["4046076-9"])]


def wait_for(condition, what: str) -> None:
    deadline = time.time() + T
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_store_away_at_start_opens_by_itself_once_it_answers(tmp_path, logged):
    """A file that cannot be opened (its folder is a file): a command refuses it, a
    server's store starts down and opens in the background once the file can be made."""
    blocker = tmp_path / "folder"
    blocker.write_text("not a folder")
    url = sqlite_url(blocker / "feedback.sqlite")
    with pytest.raises(StoreUnavailableError, match="cannot open the feedback store .*: "
                       "its database is unavailable"):
        FeedbackStore(url)
    logged.records.clear()

    store = FeedbackStore(url, recover=True)  # a server's: it starts all the same
    try:
        health = store.health
        assert (health.state, health.down, health.last_reachable) == ("unavailable", True,
                                                                       None)
        with pytest.raises(StoreUnavailableError, match="nothing was stored"):
            store.add("p", one("r1"))
        with pytest.raises(StoreUnavailableError):
            store.last_id()
        assert logged.levels() == ["WARNING"]  # once, whatever the attempts
        assert str(blocker) in logged.records[0].getMessage()

        blocker.unlink()
        blocker.mkdir()  # the file can be made now: no request needed to notice
        wait_for(lambda: not health.down, "the background probe")
        assert health.state == "ok" and health.last_reachable is not None
        assert logged.levels() == ["WARNING", "INFO"]
        assert "works again" in logged.records[1].getMessage()
        assert store.add("p", one("r2")) == 1
        assert store.count("p") == 1  # the refused one was not stored
    finally:
        store.close()


def schema(path) -> list | bytes:
    """The tables of an SQLite file (its bytes when it is none)."""
    try:
        with sqlite3.connect(path) as con:
            return con.execute("select name, sql from sqlite_master order by name").fetchall()
    except sqlite3.DatabaseError:
        return path.read_bytes()


def _foreign_tables(path):
    with sqlite3.connect(path) as con:
        con.execute("create table orders (id integer primary key, total real)")


def _other_decisions(path):
    with sqlite3.connect(path) as con:
        con.execute("create table decisions (id integer primary key, verdict text)")


def _newer(path):
    FeedbackStore(sqlite_url(path)).close()
    with sqlite3.connect(path) as con:
        con.execute("update tagalign_schema set version = ?", (SCHEMA_VERSION + 1,))


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda p: p.write_text("name\tlabel\n"), NotAStoreError,
     r"not a feedback store \(file is not a database\)"),
    (_foreign_tables, NotAStoreError, r"not a feedback store \(its tables: orders\)"),
    (_other_decisions, NotAStoreError,
     r"not a feedback store \(its decisions table has no abstract, created, decision, "),
    (_newer, NewerStoreError, rf"it was made by a newer tagalign \(schema version "
     rf"{SCHEMA_VERSION + 1}; this one reads up to {SCHEMA_VERSION}\): upgrade tagalign"),
], ids=["text-file", "foreign-tables", "other-decisions", "newer-schema"])
def test_a_store_that_is_wrong_is_refused_also_by_a_server(tmp_path, logged, make, error,
                                                          message):
    path = tmp_path / "feedback.sqlite"
    make(path)
    before = schema(path)
    for recover in (False, True):
        with pytest.raises(error, match=f"cannot open the feedback store {path}: {message}"):
            FeedbackStore(sqlite_url(path), recover=recover)
    assert logged.records == []  # no "unavailable" warning before the refusal
    assert schema(path) == before  # nothing created in another program's file


@pytest.mark.parametrize(("url", "message"), [
    ("foo://host/db", r"URL \(foo:…\) names no database tagalign knows"),
    ("mysql://user:secret@host/db", r"no database driver for mysql \(MySQLdb\)"),
])
def test_an_unknown_url_or_driver_is_refused_without_its_password(url, message):
    with pytest.raises(WrongStoreError, match=message) as err:
        FeedbackStore(url, recover=True)
    assert "secret" not in str(err.value)


def test_a_new_store_has_its_version_and_one_without_is_version_1(tmp_path):
    path = tmp_path / "feedback.sqlite"
    FeedbackStore(sqlite_url(path)).add("p", one("old"))
    with sqlite3.connect(path) as con:
        assert con.execute("select name, version from tagalign_schema").fetchall() == [
            ("feedback", SCHEMA_VERSION)]
        con.execute("drop table tagalign_schema")  # as a store made before the version
    store = FeedbackStore(sqlite_url(path))  # a command opens it as it is
    assert store.count("p") == 1
    store.close()
    store = FeedbackStore(sqlite_url(path), recover=True)  # a server marks it
    with store.engine.connect() as conn:
        assert conn.execute(text("select version from tagalign_schema")).scalar() == \
            SCHEMA_VERSION
    store.close()


def test_workers_agree_on_the_start_row_of_a_store_that_was_away(tmp_path):
    """Worker A reaches the store, finds where learning starts and stores a learn; worker B
    reaches it after that: both start after the same row, so B learns A's record too
    (with "the last row when each reached it", B would start after A's row and miss it)."""
    blocker = tmp_path / "folder"
    blocker.write_text("not a folder")
    url = sqlite_url(blocker / "feedback.sqlite")
    state = tmp_path / "workers"
    state.mkdir()
    stores = [FeedbackStore(url, recover=True) for _ in range(2)]
    try:
        a, b = (Learning(store, ["p"], Workers(2, state).start_row, shared=True)
                for store in stores)
        assert a.start == b.start == {}  # away: found later
        blocker.unlink()
        blocker.mkdir()
        wait_for(lambda: not any(s.health.down for s in stores), "the background probes")
        FeedbackStore(url).add("p", one("before"))  # stored before any worker reached it
        assert a.started("p") == 1
        stores[0].add("p", one("through-a"))
        assert b.started("p") == 1
        learned, _ = stores[1].learned_since("p", b.applied["p"])
        assert [r.id for r in learned] == ["through-a"]
    finally:
        for store in stores:
            store.close()
