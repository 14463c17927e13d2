"""The feedback store: transactions survive a killed writer; export to training JSONL."""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import os
import signal
import time

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.feedback import Decision, FeedbackStore, sqlite_url
from tagalign.feedback.schema import decisions
from tagalign.records import Record


def _writer(url: str) -> None:
    store = FeedbackStore(url)
    i = 0
    while True:  # each request: one record, 5 decisions, one transaction
        rec = Record(id=f"r{i}", title=f"title {i}", language="de")
        store.add("p", [Decision(rec, [f"{i}-{k}" for k in range(3)], [f"{i}-x", f"{i}-y"])])
        i += 1


@pytest.fixture(scope="module")
def postgres_url(postgres_cluster) -> str:
    """The session's throwaway PostgreSQL cluster (skipped where none)."""
    return postgres_cluster.url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "feedback.sqlite")
    url = request.getfixturevalue("postgres_url")
    with FeedbackStore(url).engine.begin() as conn:  # each test starts empty
        conn.execute(decisions.delete())
    return url


def test_killed_writer_loses_no_committed_row(store_url):
    store = FeedbackStore(store_url)
    proc = mp.get_context("spawn").Process(target=_writer, args=(store_url,))
    proc.start()
    deadline = time.time() + 60
    while time.time() < deadline and store.count("p") <= 200:
        time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)  # most likely inside a transaction
    proc.join()
    store.close()
    store = FeedbackStore(store_url)  # opens again after the kill
    with store.engine.connect() as conn:
        if store.engine.dialect.name == "sqlite":
            assert conn.exec_driver_sql("pragma integrity_check").scalar() == "ok"
        counts = conn.execute(select(decisions.c.record_id, func.count())
                              .group_by(decisions.c.record_id)).all()
    assert len(counts) > 40
    assert all(n == 5 for _, n in counts)  # never half a request
    ids = sorted(int(r[1:]) for r, _ in counts)
    assert ids == list(range(len(ids)))  # nothing committed was lost
    assert store.count("p") == 5 * len(ids)


def test_postgres_store_round_trip(postgres_url):
    store = FeedbackStore(postgres_url)
    assert store.url.startswith("postgresql+psycopg://")
    with store.engine.begin() as conn:
        conn.execute(decisions.delete())
    rec = Record(id="pg-1", title="Pilze am Fachwerk", abstract="Holz", language="de")
    assert store.add("proj", [Decision(rec, ["4046076-9"], ["4045791-6"])]) == 2
    confirmed = list(store.confirmed_records("proj"))
    assert [(r.id, r.title, r.subjects) for r in confirmed] == [
        ("pg-1", "Pilze am Fachwerk", ["4046076-9"])]


def test_confirmed_records_and_export(tmp_path):
    store = FeedbackStore(sqlite_url(tmp_path / "feedback.sqlite"))
    rec = Record(id="a", title="T", abstract="A", language="en", type="Book")
    store.add("proj", [Decision(rec, ["1-1", "2-2"], ["3-3"])])
    # the later request replaces the earlier one on the record (2-2 rejected, 3-3 taken back)
    store.add("proj", [Decision(rec, ["1-1"], ["2-2"])])
    store.add("other", [Decision(Record(id="b", title="U"), ["4-4"])])
    confirmed = list(store.confirmed_records("proj"))
    assert [(r.id, r.subjects, r.language) for r in confirmed] == [("a", ["1-1"], "en")]
    out = tmp_path / "confirmed.jsonl.gz"
    res = CliRunner().invoke(app, ["feedback", "export", str(tmp_path / "feedback.sqlite"),
                                   "--out", str(out), "--project", "proj"])
    assert res.exit_code == 0, res.output
    with gzip.open(out, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    assert rows == [{"id": "a", "type": "Book", "lang": "en", "title": "T", "abstract": "A",
                     "subjects": ["1-1"], "domains": []}]


def test_latest_request_per_record_replaces_earlier_ones(tmp_path):
    """The page sends a record's whole decision on each click: a subject taken back (in
    neither list) is no longer confirmed, and taking all back confirms nothing."""
    store = FeedbackStore(sqlite_url(tmp_path / "feedback.sqlite"))
    rec = Record(id="a", title="T")
    for accepted in (["1-1"], ["1-1", "2-2"], ["2-2"], ["1-1", "2-2", "3-3"], ["3-3"]):
        store.add("proj", [Decision(rec, accepted)])
    store.add("proj", [Decision(rec, ["2-2"], ["4-4"])])
    store.add("other", [Decision(rec, ["9-9"])])
    assert [r.subjects for r in store.confirmed_records("proj")] == [["2-2"]]
    assert store.latest_decisions("proj", "a") == {"2-2": "accept", "4-4": "reject"}
    assert store.add("proj", [Decision(rec, [])]) == 0  # all taken back
    assert list(store.confirmed_records("proj")) == []
    assert store.latest_decisions("proj", "a") == {}
    assert [r.subjects for r in store.confirmed_records()] == [["9-9"]]


def test_learned_since_reads_each_records_latest_request_after_a_row(store_url):
    """What a worker catches up with (`tagalign.serve.learning`): the records decided in
    rows after the last one it applied, each with the subjects its latest request there
    accepted (none: taken back), in the order of those requests."""
    store = FeedbackStore(store_url)
    start = store.last_id()
    a, b, c = (Record(id=i, title=f"title {i}", language="de") for i in "abc")
    store.add("p", [Decision(a, ["1-1"])])
    store.add("p", [Decision(b, ["2-2"], ["3-3"])])
    mark = store.last_id()
    assert mark > start
    store.add("other", [Decision(c, ["4-4"])])
    store.add("p", [Decision(a, ["5-5", "6-6"]), Decision(c, [], ["7-7"])])
    records, last = store.learned_since("p", start)
    assert [(r.id, r.subjects, r.title, r.language) for r in records] == [
        ("b", ["2-2"], "title b", "de"), ("a", ["5-5", "6-6"], "title a", "de"),
        ("c", [], "title c", "de")]  # c: decided with nothing accepted, votes for nothing
    assert last == store.last_id()
    later, _ = store.learned_since("p", mark)  # b's only request was before the mark
    assert [(r.id, r.subjects) for r in later] == [("a", ["5-5", "6-6"]), ("c", [])]
    assert store.learned_since("p", last) == ([], last)
    store.add("p", [Decision(b, [])])  # taken back
    assert [(r.id, r.subjects) for r in store.learned_since("p", last)[0]] == [("b", [])]


def test_reviewed_keeps_origins_and_an_older_table_gains_the_column(store_url):
    """The catalogue export's query (issue 47) on both databases: each record's latest
    request with each accepted subject's origin, ``since`` in UTC; a table made before the
    origin column gets it when a store opens it, its rows read as suggested."""
    import datetime as dt

    from sqlalchemy import text

    store = FeedbackStore(store_url)
    with store.engine.begin() as conn:  # as a release before both made it: no origin
        conn.execute(text("ALTER TABLE decisions DROP COLUMN origin"))  # column, no version
        conn.execute(text("DROP TABLE tagalign_schema"))
        conn.execute(decisions.insert(), {  # the columns it had, no more
            "created": dt.datetime(2025, 1, 1, 23, 30, tzinfo=dt.UTC), "project": "p",
            "record_id": "a", "title": "T", "subject_id": "1-1", "decision": "accept"})
    store.close()
    store = FeedbackStore(store_url)
    store.add("p", [Decision(Record(id="b", title="U"), ["2-2", "3-3"], ["4-4"],
                             added=["3-3"])])
    got = [(r.record.id, dict(r.origins), list(r.rejected)) for r in store.reviewed("p")]
    assert got == [("a", {"1-1": "suggested"}, []),
                   ("b", {"2-2": "suggested", "3-3": "added"}, ["4-4"])]
    since = dt.datetime(2025, 1, 2, 0, 15, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert [r.record.id for r in store.reviewed("p", since)] == ["a", "b"]  # 23:15 UTC
    assert [r.record.id for r in store.reviewed("p", since + dt.timedelta(hours=1))] == ["b"]
    store.close()
