"""The feedback store: transactions survive a killed writer; export to training JSONL."""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import os
import signal
import sqlite3
import time

from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.records import Record
from tagalign.serve.feedback import Decision, FeedbackStore, sqlite_url


def _writer(url: str) -> None:
    store = FeedbackStore(url)
    i = 0
    while True:  # each request: one record, 5 decisions, one transaction
        rec = Record(id=f"r{i}", title=f"title {i}", language="de")
        store.add("p", [Decision(rec, [f"{i}-{k}" for k in range(3)], [f"{i}-x", f"{i}-y"])])
        i += 1


def test_killed_writer_loses_no_committed_row(tmp_path):
    db = tmp_path / "feedback.sqlite"
    url = sqlite_url(db)
    FeedbackStore(url).close()
    proc = mp.get_context("spawn").Process(target=_writer, args=(url,))
    proc.start()
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.3)
        with sqlite3.connect(db) as conn:
            if conn.execute("select count(*) from decisions").fetchone()[0] > 200:
                break
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    with sqlite3.connect(db) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        counts = conn.execute("select record_id, count(*) from decisions group by record_id"
                              ).fetchall()
    assert len(counts) > 40
    assert all(n == 5 for _, n in counts)  # never half a request
    ids = sorted(int(r[1:]) for r, _ in counts)
    assert ids == list(range(len(ids)))  # nothing committed was lost


def test_confirmed_records_and_export(tmp_path):
    store = FeedbackStore(sqlite_url(tmp_path / "feedback.sqlite"))
    rec = Record(id="a", title="T", abstract="A", language="en", type="Book")
    store.add("proj", [Decision(rec, ["1-1", "2-2"], ["3-3"])])
    store.add("proj", [Decision(rec, [], ["2-2"])])  # the later decision wins
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
