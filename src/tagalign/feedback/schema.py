"""The feedback store's schema: its tables and the rows a decision becomes.

Every decision is one row of ``decisions`` with its time and record; the rows one request
writes for a record share their time and state the whole decision on it (a request that
decides nothing on a record writes one `CLEARED` row), so the latest request per (project,
record id) replaces the earlier ones. Each subject's ``origin`` says whether the model
suggested it or a librarian found it by search. A second table, ``queue_progress``, keeps
which records of a review queue (`tagalign.serve.queue`) a librarian has finished, so a
queue resumes where it stopped. A third, ``tagalign_schema``, holds the schema's version
(`SCHEMA_VERSION`), written when a store is made: a store without it was made before it
existed (version 1) and is brought up to date when it is opened (`add_origin`, then the
version row); a store of a newer version, or a database whose tables are not a feedback
store's, is refused (`open_schema`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from tagalign.feedback.faults import NewerStoreError, NotAStoreError
from tagalign.records import Record

metadata = MetaData()
decisions = Table(
    "decisions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("project", String(200), nullable=False, index=True),
    Column("record_id", String(200), nullable=False, index=True),
    Column("title", Text, nullable=False),
    Column("abstract", Text, nullable=False, default=""),
    Column("language", String(8)),
    Column("record_type", String(40)),
    Column("subject_id", String(100), nullable=False),
    Column("decision", String(8), nullable=False),  # "accept" | "reject"
    # where the subject came from: "suggested" (the model's list) or "added" (a librarian's
    # search); added to stores made before it (`_add_origin`), whose rows read as NULL
    Column("origin", String(10)),
)

queue_progress = Table(
    "queue_progress", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("finished", DateTime(timezone=True), nullable=False),
    Column("project", String(200), nullable=False),
    Column("queue", String(64), nullable=False),  # `RecordQueue.name`: one per records file
    Column("record_id", String(200), nullable=False),
    UniqueConstraint("project", "queue", "record_id", name="uq_queue_record"),
)

#: the version of the schema this tagalign writes: a later one raises it only for a change
#: an older tagalign cannot read or write (an added nullable column is none)
SCHEMA_VERSION = 2
#: the version of a store made before ``tagalign_schema`` existed
UNMARKED_VERSION = 1
schema_version = Table(
    "tagalign_schema", metadata,
    Column("name", String(40), primary_key=True),  # `_MARK`: one row
    Column("version", Integer, nullable=False),
    # when a server last wrote to see that the store takes writes (`touch`)
    Column("checked", DateTime(timezone=True), nullable=False),
)
_MARK = "feedback"

#: the decision of a row saying "nothing decided on this record" (its subject_id is "")
CLEARED = "clear"
#: a decided subject's origin: the model suggested it, or a librarian added it by search
SUGGESTED, ADDED = "suggested", "added"


@dataclass
class Decision:
    """A request's whole decision on one record; ``added``: the subjects of ``accepted``
    and ``rejected`` a librarian found by search rather than among the suggestions."""

    record: Record
    accepted: Sequence[str]
    rejected: Sequence[str] = ()
    added: Sequence[str] = ()


@dataclass(frozen=True)
class Reviewed:
    """One record as its latest request left it (`FeedbackStore.reviewed`): the record
    (its ``subjects``: those accepted, in the order stored), each accepted subject's
    origin (`SUGGESTED` or `ADDED`), the subjects rejected, and when it was decided."""

    project: str
    record: Record
    origins: Mapping[str, str]
    rejected: Sequence[str]
    decided: _dt.datetime


def as_reviewed(rows: Sequence[Any]) -> Reviewed:
    """The rows of one request as a `Reviewed`; a row stored before origins were kept
    (NULL) reads as suggested, the only way subjects came in before the page's search."""
    row = rows[0]
    origins = {r["subject_id"]: r["origin"] or SUGGESTED for r in rows
               if r["decision"] == "accept"}
    created = row["created"]
    record = Record(id=row["record_id"], title=row["title"], abstract=row["abstract"] or "",
                    language=row["language"], type=row["record_type"], subjects=list(origins))
    return Reviewed(project=row["project"], record=record, origins=origins,
                    rejected=[r["subject_id"] for r in rows if r["decision"] == "reject"],
                    decided=created.replace(tzinfo=_dt.UTC) if created.tzinfo is None
                    else created)


def add_origin(engine: Engine) -> None:
    """Add the ``origin`` column to a store made before it existed (its rows read as
    `SUGGESTED`); nullable, so an older tagalign still writes into the store."""
    def has_origin() -> bool:
        return any(c["name"] == "origin" for c in inspect(engine).get_columns("decisions"))

    if has_origin():
        return
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE decisions ADD COLUMN origin VARCHAR(10)"))
    except (OperationalError, ProgrammingError):
        if not has_origin():  # else another process added it first
            raise


def _version(conn: Connection, tables: set[str], sqlite: bool) -> int | None:
    """The version of the store in a database with ``tables`` (None: none there yet);
    raises when they are not a feedback store's or are newer than this tagalign's."""
    found = None
    if schema_version.name in tables:
        found = conn.execute(select(schema_version.c.version)
                             .where(schema_version.c.name == _MARK)).scalar()
        if found is not None and found > SCHEMA_VERSION:
            raise NewerStoreError(f"it was made by a newer tagalign (schema version {found}; "
                                  f"this one reads up to {SCHEMA_VERSION}): upgrade tagalign")
    if decisions.name in tables:
        have = {c["name"] for c in inspect(conn).get_columns(decisions.name)}
        missing = sorted({c.name for c in decisions.columns} - have - {"origin"})
        if missing:
            raise NotAStoreError(f"not a feedback store (its decisions table has no "
                                 f"{', '.join(missing)})")
        return found or UNMARKED_VERSION
    if sqlite and tables - {schema_version.name, queue_progress.name}:
        # a server database may hold other programs' tables; a file of its own may not
        raise NotAStoreError(f"not a feedback store (its tables: "
                             f"{', '.join(sorted(tables)[:5])})")
    return None


def _create(engine: Engine, tables: Sequence[Table]) -> None:
    try:
        metadata.create_all(engine, tables=tables)
    except (OperationalError, ProgrammingError):
        # another process created them between the check and the CREATE (two workers
        # opening a new store at once): they are there now
        metadata.create_all(engine, tables=tables)


def open_schema(engine: Engine) -> None:
    """Make a store ready to use: refuse a database that is not a feedback store or is of
    a newer version (`NotAStoreError`, `NewerStoreError`); create a new store's tables and
    version row; bring a store of version 1 up to date (`add_origin`; its version row is
    written by the first server that writes to it, `touch`)."""
    with engine.connect() as conn:
        version = _version(conn, set(inspect(conn).get_table_names()),
                           engine.dialect.name == "sqlite")
    if version == SCHEMA_VERSION:
        return
    _create(engine, [decisions, queue_progress])
    add_origin(engine)
    if version is None:
        touch(engine)


def touch(engine: Engine) -> None:
    """Write the store's version row (``checked``: now; this tagalign's version when there
    is none, with its table): how a server sees that the store takes writes
    (`tagalign.feedback.store.FeedbackStore.probe`), and a version-1 store is marked."""
    now = _dt.datetime.now(_dt.UTC)
    _create(engine, [schema_version])  # a version-1 store's first
    with engine.begin() as conn:
        done = conn.execute(schema_version.update().where(schema_version.c.name == _MARK)
                            .values(checked=now))
        if done.rowcount:
            return
    try:
        with engine.begin() as conn:
            conn.execute(schema_version.insert().values(name=_MARK, version=SCHEMA_VERSION,
                                                        checked=now))
    except IntegrityError:  # another process wrote it first
        pass


__all__ = ["ADDED", "CLEARED", "SCHEMA_VERSION", "SUGGESTED", "UNMARKED_VERSION", "Decision",
           "Reviewed", "add_origin", "as_reviewed", "decisions", "metadata", "open_schema",
           "queue_progress", "schema_version", "touch"]
