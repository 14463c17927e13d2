"""The feedback store's schema: its tables and the rows a decision becomes.

Every decision is one row of ``decisions`` with its time and record; the rows one request
writes for a record share their time and state the whole decision on it (a request that
decides nothing on a record writes one `CLEARED` row), so the latest request per (project,
record id) replaces the earlier ones. Each subject's ``origin`` says whether the model
suggested it or a librarian found it by search. A second table, ``queue_progress``, keeps
which records of a review queue (`tagalign.serve.queue`) a librarian has finished, so a
queue resumes where it stopped. Stores made before a column existed are brought up to date
when they are opened (`add_origin`).
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
    text,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

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


__all__ = ["ADDED", "CLEARED", "SUGGESTED", "Decision", "Reviewed", "add_origin", "as_reviewed",
           "decisions", "metadata", "queue_progress"]
