"""Durable store of librarians' decisions (accept/reject per suggested subject).

SQLite by default (one file beside the project, WAL journal, synchronous=FULL), any
SQLAlchemy URL otherwise (e.g. ``postgresql+psycopg://…``). One row per decision
(`tagalign.feedback.schema`), the latest request per (project, record id) replacing the
earlier ones: that is what training reads (`confirmed_records`), the catalogue export
writes (`reviewed`, with each subject's ``origin``: suggested, or found by a librarian's
search) and a review queue shows (`latest_decisions`, `finished`). Each request is one
transaction, so a killed server loses at most the request in flight and never leaves half
of one behind. A full disk and a database gone away are raised as `StoreFullError` and
`StoreUnavailableError` (`tagalign.feedback.faults`); a write is tried again while a
database restarts (`tagalign.feedback.health`). The stores of served projects are routed
to by `tagalign.feedback.served`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError

from tagalign.feedback.faults import (
    CONNECT_TIMEOUT,
    StoreFault,
    StoreFullError,
    StoreUnavailableError,
    WrongStoreError,
    wrong_store,
)
from tagalign.feedback.health import StoreHealth, watch
from tagalign.feedback.schema import (
    ADDED,
    CLEARED,
    SUGGESTED,
    Decision,
    Reviewed,
    as_reviewed,
    decisions,
    open_schema,
    queue_progress,
    touch,
)
from tagalign.project import feedback_location
from tagalign.records import Record
from tagalign.records.convert import write_jsonl

log = logging.getLogger(__name__)

#: seconds a store that did not open is left alone after a try: requests meanwhile fail at
#: once, not each after a connection attempt (`CONNECT_TIMEOUT` s to a lost host)
REOPEN_PAUSE = 1.0


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def sqlite_file(url: str) -> Path | None:
    """The file of an ``sqlite:///`` URL (None: another database)."""
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


def normalise_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` → psycopg 3 (SQLAlchemy would pick psycopg2)."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def _origin(item: Decision, subject_id: str) -> str:
    return ADDED if subject_id in item.added else SUGGESTED


class FeedbackStore:
    """Decisions in one table; the schema is created on first use (SQLite or PostgreSQL).

    Opening it refuses a store that is wrong (`WrongStoreError`), and one that is away
    (unreachable, full, read-only: its `StoreFault`) unless ``recover``: a server's store
    then opens once it answers, every operation raising the fault meanwhile, and is tried in
    the background while down (`probe`). ``quiet``: its outages are not logged."""

    def __init__(self, url: str, *, recover: bool = False, quiet: bool = False):
        self.url = normalise_url(url)
        self.engine: Engine = _engine(self.url)
        # a full disk or a database gone: the package's errors (`tagalign.feedback.health`)
        self.health = StoreHealth(str(sqlite_file(self.url) or
                                      self.engine.url.render_as_string(hide_password=True)),
                                  probe=self.probe if recover else None, quiet=quiet)
        watch(self.engine, self.health)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._opened = False
        self._opening = threading.Lock()
        self._away: StoreFault | None = None  # why it did not open (yet)
        self._tried = -REOPEN_PAUSE  # when a request last tried to open it
        self._wrong: str | None = None  # what was logged of a store found wrong later
        try:
            self._open()
        except StoreFault as exc:
            if not recover:  # nothing to train on or export from: name the store
                raise exc.opening(self.health.where) from exc
            return  # away: logged once; opened by a request or the probe once it answers
        if recover:  # a full disk shows now, not at the first learn
            with contextlib.suppress(StoreFault, DBAPIError):  # noted: the probe runs
                self.probe()
                self.health.ok()

    def _open(self) -> None:
        """Check the schema, creating it if need be (`open_schema`); raises `StoreFault`
        when the store is away, `WrongStoreError` naming it when it is wrong."""
        try:
            open_schema(self.engine)
        except StoreFault as exc:
            self._away = exc
            raise
        except WrongStoreError as exc:
            raise exc.opening(self.health.where) from exc
        except DBAPIError as exc:  # the database's own answer: wrong credentials, say
            raise wrong_store(exc).opening(self.health.where) from exc
        self._opened = True

    def _ready(self) -> None:
        """Open a store that did not open yet (it was away; tried by one thread at a time,
        at most once every `REOPEN_PAUSE` s: else its fault at once). Raises its
        `StoreFault` while it is away; one found wrong once it answers is logged once and
        raises `StoreUnavailableError` (a running server cannot refuse to start)."""
        if self._opened:
            return
        if (time.monotonic() < self._tried + REOPEN_PAUSE
                or not self._opening.acquire(blocking=False)):
            raise (StoreFullError() if isinstance(self._away, StoreFullError)
                   else StoreUnavailableError())
        try:
            if not self._opened:
                self._tried = time.monotonic()
                self._open()
        except WrongStoreError as exc:
            if str(exc) != self._wrong:
                self._wrong = str(exc)
                log.error("%s; learning stays paused until it is mended", exc)
            raise StoreUnavailableError() from exc
        finally:
            self._opening.release()

    def probe(self) -> None:
        """Open the store if it is not yet, and write to it (`touch`): raises while it
        cannot be written. What a server's store is tried with in the background while it
        is down (`tagalign.feedback.health.StoreHealth`)."""
        self._ready()
        touch(self.engine)

    @classmethod
    def for_project(cls, project_path: Path) -> FeedbackStore:
        """The project's own store (PROJECT/feedback.sqlite), rows keyed by its folder's
        name (`tagalign.project.feedback_location`)."""
        return cls(feedback_location(project_path)[0])

    def add(self, project: str, items: Sequence[Decision]) -> int:
        """Store all decisions of one request in one transaction; returns rows written."""
        now = _dt.datetime.now(_dt.UTC)
        rows = []
        for item in items:
            r = item.record
            base = {"created": now, "project": project, "record_id": r.id, "title": r.title,
                    "abstract": r.abstract, "language": r.language, "record_type": r.type,
                    "origin": None}  # a cleared row's; a subject's says where it came from
            rows += [{**base, "subject_id": s, "decision": "accept", "origin": _origin(item, s)}
                     for s in item.accepted]
            rows += [{**base, "subject_id": s, "decision": "reject", "origin": _origin(item, s)}
                     for s in item.rejected]
            if not item.accepted and not item.rejected:  # all taken back
                rows.append({**base, "subject_id": "", "decision": CLEARED})
        if rows:
            self._ready()
            # a database restarting: tried again briefly (`StoreHealth.retrying`)
            self.health.retrying(lambda: self._insert(rows))
        return sum(row["decision"] != CLEARED for row in rows)

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":
                # writers one at a time, so row ids become visible in their order: a
                # reader that has seen id n never sees an id below n appear later (the
                # workers' catch-up, `learned_since`, relies on it). SQLite has one
                # writer anyway; this mode blocks other writers, never readers.
                conn.execute(text("LOCK TABLE decisions IN SHARE ROW EXCLUSIVE MODE"))
            conn.execute(decisions.insert(), rows)

    def last_id(self, project: str | None = None) -> int:
        """The highest row id of the decisions (0: none): rows written later have higher
        ids (`learned_since`). Ids count over the whole table; ``project`` is taken for
        `ServedStores.last_id`'s signature."""
        self._ready()
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.max(decisions.c.id))).scalar() or 0)

    def learned_since(self, project: str, after: int) -> tuple[list[Record], int]:
        """Each record of ``project`` decided in rows after id ``after``, with the subjects
        its latest request there accepted (none: a record taken back, which a model learns
        as voting for nothing), in the order of those requests; and the last row id read
        (``after`` when there is none). What a model must learn to catch up with requests
        other processes stored (`tagalign.serve.learning`)."""
        self._ready()
        q = (select(decisions).where(decisions.c.project == project, decisions.c.id > after)
             .order_by(decisions.c.id))
        latest: dict[str, tuple[Any, list[str]]] = {}
        last = after
        with self.engine.connect() as conn:
            for row in conn.execute(q).mappings():
                last = row["id"]
                seen = latest.get(row["record_id"])
                if seen is None or seen[0]["created"] != row["created"]:  # a later request
                    latest.pop(row["record_id"], None)  # keeps dict order = request order
                    seen = latest[row["record_id"]] = (row, [])
                if row["decision"] == "accept":
                    seen[1].append(row["subject_id"])
        return [Record(id=rid, title=row["title"], abstract=row["abstract"] or "",
                       language=row["language"], type=row["record_type"], subjects=accepted)
                for rid, (row, accepted) in latest.items()], last

    def count(self, project: str | None = None, record_prefix: str | None = None) -> int:
        """Stored decisions, optionally of one project and of record ids with a prefix."""
        self._ready()
        q = select(func.count()).select_from(decisions).where(decisions.c.decision != CLEARED)
        if project:
            q = q.where(decisions.c.project == project)
        if record_prefix:
            q = q.where(decisions.c.record_id.startswith(record_prefix, autoescape=True))
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar_one())

    def confirmed_records(self, project: str | None = None) -> Iterator[Record]:
        """Records with the subjects their latest request accepted (training data; one
        record per id and project: without ``project``, every project's)."""
        self._ready()
        q = select(decisions).order_by(decisions.c.id)
        if project:
            q = q.where(decisions.c.project == project)
        latest: dict[tuple[str, str], dict] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(q).mappings():
                key = (row["project"], row["record_id"])
                rec = latest.get(key)
                if rec is None or rec["row"]["created"] != row["created"]:  # a later request
                    rec = latest[key] = {"row": row, "subjects": {}}
                rec["row"] = row
                rec["subjects"][row["subject_id"]] = row["decision"]
        for (_, rid), item in latest.items():
            accepted = [s for s, d in item["subjects"].items() if d == "accept"]
            if accepted:
                row = item["row"]
                yield Record(id=rid, title=row["title"], abstract=row["abstract"] or "",
                             language=row["language"], type=row["record_type"],
                             subjects=accepted)

    def latest_decisions(self, project: str, record_id: str) -> dict[str, str]:
        """Subject id → its decision ("accept" | "reject") in the latest request on one
        record."""
        self._ready()
        q = (select(decisions.c.subject_id, decisions.c.decision, decisions.c.created)
             .where(decisions.c.project == project, decisions.c.record_id == record_id)
             .order_by(decisions.c.id))
        out: dict[str, str] = {}
        last = None
        with self.engine.connect() as conn:
            for sid, decision, created in conn.execute(q):
                if created != last:
                    out, last = {}, created
                if decision != CLEARED:
                    out[sid] = decision
        return out

    def finish(self, project: str, queue: str, record_id: str) -> None:
        """Mark a queue's record finished (again, or by two tabs at once: no change)."""
        self._ready()
        row = {"finished": _dt.datetime.now(_dt.UTC), "project": project, "queue": queue,
               "record_id": record_id}
        def insert() -> None:
            try:
                with self.engine.begin() as conn:
                    conn.execute(queue_progress.insert(), row)
            except IntegrityError:  # the unique (project, queue, record) row is there already
                pass

        self.health.retrying(insert)

    def finished(self, project: str, queue: str) -> set[str]:
        """Ids of the records of one queue a librarian has finished."""
        self._ready()
        q = select(queue_progress.c.record_id).where(queue_progress.c.project == project,
                                                     queue_progress.c.queue == queue)
        with self.engine.connect() as conn:
            return set(conn.execute(q).scalars())

    def export_jsonl(self, out: Path, project: str | None = None) -> int:
        return write_jsonl(Path(out), self.confirmed_records(project))

    def close(self) -> None:
        self.health.close()
        self.engine.dispose()

    def reviewed(self, project: str | None = None, since: _dt.datetime | None = None,
                 record_id: str | None = None) -> Iterator[Reviewed]:
        """Each record as its latest request left it (`Reviewed`), one per project and
        record id, ordered by them; a record whose latest request took everything back is
        left out. ``since``: only records whose latest request was stored at or after it
        (a naive time is UTC); ``record_id``: only that record. Read as a stream: one
        record's rows are in memory at a time (what the decisions export relies on)."""
        self._ready()
        q = select(decisions).order_by(decisions.c.project, decisions.c.record_id,
                                       decisions.c.id)
        if project:
            q = q.where(decisions.c.project == project)
        if record_id is not None:
            q = q.where(decisions.c.record_id == record_id)
        if since is not None:
            # the rows of a record's latest request are all at or after ``since`` when it is
            since = since.replace(tzinfo=_dt.UTC) if since.tzinfo is None else since
            q = q.where(decisions.c.created >= since.astimezone(_dt.UTC))
        with self.engine.connect() as conn:
            rows = conn.execution_options(yield_per=1000).execute(q).mappings()
            for _, group in groupby(rows, key=lambda r: (r["project"], r["record_id"])):
                latest: list[Any] = []
                for row in group:
                    if latest and latest[0]["created"] != row["created"]:  # a later request
                        latest = []
                    latest.append(row)
                if latest[0]["decision"] != CLEARED:
                    yield as_reviewed(latest)


def make_folder(url: str) -> None:
    """The folder of an SQLite store's file (an untrained project's, say); one that cannot
    be made leaves the file one that cannot be opened: the store is away."""
    db = sqlite_file(normalise_url(url))
    if db is not None:
        with contextlib.suppress(OSError):
            db.parent.mkdir(parents=True, exist_ok=True)


def prepare(url: str) -> int | None:
    """Open the store at ``url`` once, creating its tables (and an SQLite file's folder),
    and return its last row id (`FeedbackStore.last_id`): done by a server before its
    workers start, so they find the tables made and agree on where learning starts. None:
    the store is away: each worker opens it once it answers (and logs that it is away).
    Raises `WrongStoreError` for a store that is wrong."""
    make_folder(url)
    try:
        store = FeedbackStore(url, quiet=True)
    except StoreFault:
        return None
    try:
        return store.last_id()
    finally:
        store.close()


def _engine(url: str) -> Engine:
    """The store's engine. A server database's connections are checked before each use
    (``pool_pre_ping``: one after a restart is replaced, not failed) and given
    `CONNECT_TIMEOUT` seconds to open; an SQLite file needs neither."""
    scheme = url.split(":", 1)[0]
    try:
        if url.startswith("sqlite"):
            return create_engine(url, future=True)
        connect_args = {"connect_timeout": CONNECT_TIMEOUT} if url.startswith("postgresql") \
            and "connect_timeout=" not in url else {}
        return create_engine(url, future=True, pool_pre_ping=True, connect_args=connect_args)
    except ModuleNotFoundError as exc:
        hint = ("pip install 'tagalign[postgres]'" if scheme.startswith("postgresql")
                else "install its driver")
        raise WrongStoreError(f"no database driver for {scheme} ({exc.name}); {hint}"
                              ) from exc
    except ArgumentError as exc:  # an unknown scheme, a URL that does not parse
        raise WrongStoreError(f"the feedback store's URL ({scheme}:…) names no database "
                              "tagalign knows: give sqlite:///FILE or "
                              "postgresql://USER@HOST/DATABASE") from exc


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=10000")  # first: switching to WAL may wait for a lock
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.close()


__all__ = ["FeedbackStore", "make_folder", "normalise_url", "prepare", "sqlite_file",
           "sqlite_url"]
