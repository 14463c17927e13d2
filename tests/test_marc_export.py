"""Librarians' decisions back to the catalogue (issue 47): `tagalign feedback export
--format marc|marcxml` with ``--merge``, ``--since`` and ``--project``; the store's origin
column (an accepted suggestion vs a subject added by search), added to an older store; the
decisions route in-process (its token, its streamed formats). The real server's round
trip is tests/test_marc_roundtrip.py."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pymarc import MARCReader, parse_xml_to_array
from sqlalchemy import update
from typer.testing import CliRunner

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from marc_fixtures import binary, dnb_record, plain_record, write
from tagalign.cli import app
from tagalign.feedback import ADDED, SUGGESTED, Decision, FeedbackStore, sqlite_url
from tagalign.feedback.schema import decisions
from tagalign.project import Project, ServingSettings
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.serve.tokens import TokenStore
from tiny_models import tiny_records, tiny_vocab

runner = CliRunner()
EPOS, KI, PILZE, HOLZ, PHILO = "4015065-3", "4033447-8", "4046076-9", "4025741-1", "4045791-6"
ZUKUNFT = "4068097-6"
DATE = dt.datetime.now(dt.UTC).strftime("%Y%m%d")  # the decisions are stored today


def _pymarc(path_or_bytes) -> list:
    data = path_or_bytes.read_bytes() if isinstance(path_or_bytes, Path) else path_or_bytes
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return parse_xml_to_array(io.BytesIO(data)) if data.lstrip().startswith(b"<") \
        else list(MARCReader(data))


def _fields(rec) -> list[tuple]:
    """Every field: (tag, data) or (tag, indicators, subfields as (code, value))."""
    return [(f.tag, f.data) if f.control_field else
            (f.tag, "".join(f.indicators), [(s.code, s.value) for s in f.subfields])
            for f in rec.fields]


def subject(link: int, sid: str, label: str) -> tuple:
    return ("650", " 7", [("8", f"{link}\\p"), ("0", f"(DE-588){sid}"),
                          ("0", f"https://d-nb.info/gnd/{sid}"), ("a", label), ("2", "gnd")])


def confirmed(link: int, agency: str, date: str = DATE) -> tuple:
    return ("883", "1 ", [("8", f"{link}\\p"),
                          ("a", "maschinell gebildet, intellektuell bestätigt"),
                          ("d", date), ("q", agency)])


def intellectual(link: int, agency: str, date: str = DATE) -> tuple:
    return ("883", "2 ", [("8", f"{link}\\p"), ("a", "dnb"), ("d", date), ("q", agency)])


@pytest.fixture
def store(tmp_path):
    """A store with project p's decisions on three records and project q's on one."""
    tiny_vocab().save(tmp_path / "vocab.json.gz")
    store = FeedbackStore(sqlite_url(tmp_path / "feedback.sqlite"))
    rec = Record(id="(DE-101)1234567890", title="Pilze am Fachwerk", language="de")
    store.add("p", [Decision(rec, [EPOS, PILZE], [KI])])
    # the latest request decides: Epos and Pilze accepted, Zukunft found by search,
    # Philosophie rejected (KI taken back)
    store.add("p", [Decision(rec, [EPOS, ZUKUNFT, PILZE], [PHILO], added=[ZUKUNFT])])
    store.add("p", [Decision(Record(id="3A222", title="Nichts", language="en"), [], [EPOS])])
    store.add("p", [Decision(Record(id="cleared", title="Zurück"), [EPOS])])
    store.add("p", [Decision(Record(id="cleared", title="Zurück"), [])])  # all taken back
    store.add("q", [Decision(Record(id="(DE-101)1234567890", title="Q"), [KI])])
    yield store
    store.close()


def _export(tmp_path, out: str, *more: str, project: str = "p"):
    labels = [] if out.endswith(".jsonl") else ["--vocab", str(tmp_path / "vocab.json.gz")]
    res = runner.invoke(app, ["feedback", "export", str(tmp_path / "feedback.sqlite"),
                              "--project", project, *labels, "--out", str(tmp_path / out),
                              *more])
    assert res.exit_code == 0, res.output
    return res


@pytest.mark.parametrize("name", ["out.mrc", "out.xml", "out.mrc.gz"])
def test_export_writes_each_records_latest_decision_as_650_and_883(store, tmp_path, name):
    res = _export(tmp_path, name)
    assert "2 reviewed records written" in res.output
    first, nothing = _pymarc(tmp_path / name)
    # ids as the catalogue gave them: 001 and 003 from "(DE-101)1234567890"; the rejected
    # suggestions and the subject taken back are not written
    assert _fields(first) == [
        ("001", "1234567890"), ("003", "DE-101"),
        subject(1, EPOS, "Epos"), subject(2, ZUKUNFT, "Zukunft"), subject(3, PILZE, "Pilze"),
        confirmed(1, "DE-101"), intellectual(2, "DE-101"), confirmed(3, "DE-101")]
    assert first.leader[9] == "a"  # UTF-8
    # reviewed, nothing accepted: its control number alone; labels in the record's language
    assert _fields(nothing) == [("001", "3A222")]


def test_agency_option_and_labels_in_the_records_language(tmp_path):
    tiny_vocab().save(tmp_path / "vocab.json.gz")
    store = FeedbackStore(sqlite_url(tmp_path / "feedback.sqlite"))
    store.add("p", [Decision(Record(id="en-1", title="AI", language="en"), [KI], added=[KI])])
    _export(tmp_path, "out.xml", "--agency", "DE-Hil2")
    [rec] = _pymarc(tmp_path / "out.xml")
    # no 003: the agency given (default tagalign); the English label of the English record
    assert _fields(rec) == [("001", "en-1"), subject(1, KI, "neural"),
                            intellectual(1, "DE-Hil2")]
    _export(tmp_path, "default.xml")
    assert _pymarc(tmp_path / "default.xml")[0].get_fields("883")[0]["q"] == "tagalign"


def test_merge_adds_decided_subjects_and_keeps_the_catalogue_fields_byte_identical(
        store, tmp_path):
    # holds Pilze already (twice: a person's and a machine's)
    original = dnb_record()
    source = write(tmp_path / "catalogue.mrc",
                   binary([plain_record("555", "Nicht geprüft", "DE-101"), original]))
    res = _export(tmp_path, "merged.mrc", "--merge", str(source))
    # the record of 3A222 (reviewed) is not in the catalogue's file: said, not written
    assert "1 reviewed records written" in res.output
    assert "1 reviewed records are not in" in res.output
    [merged] = _pymarc(tmp_path / "merged.mrc")
    [before] = _pymarc(binary([original]))
    # links after the 1\p and 2\p the record uses; Pilze is there already: no second 650
    added = [subject(3, EPOS, "Epos"), subject(4, ZUKUNFT, "Zukunft"),
             confirmed(3, "DE-101"), intellectual(4, "DE-101")]
    assert [f for f in _fields(merged) if f not in added] == _fields(before)
    assert [f for f in _fields(merged) if f in added] == added
    kept = [f.as_marc("utf-8") for f in merged.fields
            if (f.tag, f.get("8") if not f.control_field else None) not in
            {("650", "3\\p"), ("650", "4\\p"), ("883", "3\\p"), ("883", "4\\p")}]
    assert kept == [f.as_marc("utf-8") for f in before.fields]  # byte for byte
    # the new 650s stand after the record's own, before its 655
    assert [f.tag for f in merged.fields].index("655") > \
        [f.get("8") for f in merged.fields].index("4\\p")
    # MARC-XML in, MARC-XML out: the same fields
    xml_source = tmp_path / "catalogue.xml"
    xml_source.write_bytes(binary([original]))  # told by content, not by name
    _export(tmp_path, "merged.xml", "--merge", str(xml_source))
    assert _fields(_pymarc(tmp_path / "merged.xml")[0]) == _fields(merged)


def test_since_and_project_choose_the_decisions(store, tmp_path):
    old = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
    with store.engine.begin() as conn:
        conn.execute(update(decisions).where(decisions.c.record_id == "3A222")
                     .values(created=old))
    _export(tmp_path, "today.mrc", "--since", dt.date.today().isoformat())
    assert [r["001"].data for r in _pymarc(tmp_path / "today.mrc")] == ["1234567890"]
    # a time with its offset: 13:30 in +02:00 is 11:30 UTC, before the 12:00 UTC decision
    _export(tmp_path, "since.mrc", "--since", "2025-06-01T13:30:00+02:00")
    assert [r["001"].data for r in _pymarc(tmp_path / "since.mrc")] == ["1234567890", "3A222"]
    _export(tmp_path, "after.mrc", "--since", "2025-06-01T12:00:01")  # naive: UTC
    assert [r["001"].data for r in _pymarc(tmp_path / "after.mrc")] == ["1234567890"]
    # another project's decisions on the same record: its own subjects, never p's
    _export(tmp_path, "q.mrc", project="q")
    [q] = _pymarc(tmp_path / "q.mrc")
    assert _fields(q)[2:] == [subject(1, KI, "Künstliche Intelligenz"), confirmed(1, "DE-101")]
    # JSONL (training data): the records with an accepted subject, filtered the same way
    _export(tmp_path, "today.jsonl", "--since", dt.date.today().isoformat())
    rows = [json.loads(line) for line in (tmp_path / "today.jsonl").read_text().splitlines()]
    assert [(r["id"], r["subjects"]) for r in rows] == [
        ("(DE-101)1234567890", [EPOS, ZUKUNFT, PILZE])]


@pytest.mark.parametrize("args, message", [
    (["--out", "x.jsonl", "--merge", "c.mrc"], "--merge and --agency go with MARC"),
    (["--out", "x.mrc", "--since", "yesterday"], "since 'yesterday': give an ISO date"),
    (["--out", "x.mrc", "--format", "csv"], "--format csv: use jsonl, marc or marcxml"),
])
def test_refusals_are_one_error_line(store, tmp_path, args, message):
    res = runner.invoke(app, ["feedback", "export", str(tmp_path / "feedback.sqlite"),
                              "--project", "p", *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_marc_from_a_store_file_needs_a_project_and_labels(store, tmp_path):
    db = str(tmp_path / "feedback.sqlite")
    res = runner.invoke(app, ["feedback", "export", db, "--out", str(tmp_path / "x.mrc")])
    assert res.exit_code == 2 and "give --project KEY" in res.output
    res = runner.invoke(app, ["feedback", "export", db, "--project", "p",
                              "--out", str(tmp_path / "x.mrc")])
    assert res.exit_code == 2 and "give --vocab PROJECT" in res.output
    assert not (tmp_path / "x.mrc").exists()


OLD_SCHEMA = """CREATE TABLE decisions (id INTEGER NOT NULL PRIMARY KEY, created DATETIME NOT
NULL, project VARCHAR(200) NOT NULL, record_id VARCHAR(200) NOT NULL, title TEXT NOT NULL,
abstract TEXT NOT NULL, language VARCHAR(8), record_type VARCHAR(40), subject_id VARCHAR(100)
NOT NULL, decision VARCHAR(8) NOT NULL)"""


def test_a_store_made_before_origins_gains_the_column_and_reads_as_suggested(tmp_path):
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as conn:  # the table as the last release made it
        conn.execute(OLD_SCHEMA)
        conn.execute("INSERT INTO decisions (created, project, record_id, title, abstract, "
                     "subject_id, decision) VALUES ('2025-01-02 03:04:05.000000', 'p', 'old', "
                     "'T', '', ?, 'accept')", (EPOS,))
    conn.close()
    store = FeedbackStore(sqlite_url(db))
    store.add("p", [Decision(Record(id="new", title="N"), [EPOS, KI], [PHILO], added=[KI])])
    [new, old] = store.reviewed("p")  # by record id
    assert (old.record.id, dict(old.origins)) == ("old", {EPOS: SUGGESTED})
    assert old.decided == dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert dict(new.origins) == {EPOS: SUGGESTED, KI: ADDED} and new.rejected == [PHILO]
    store.close()
    with sqlite3.connect(db) as conn:  # an older tagalign still writes into it
        conn.execute("INSERT INTO decisions (created, project, record_id, title, abstract, "
                     "subject_id, decision) VALUES ('2025-01-03 00:00:00.000000', 'p', "
                     "'older-writer', 'T', '', ?, 'accept')", (HOLZ,))
        rows = conn.execute("SELECT record_id, subject_id, origin FROM decisions "
                            "ORDER BY id").fetchall()
    conn.close()
    assert rows == [("old", EPOS, None), ("new", EPOS, "suggested"), ("new", KI, "added"),
                    ("new", PHILO, "suggested"), ("older-writer", HOLZ, None)]
    again = FeedbackStore(sqlite_url(db))  # opened again: nothing to add
    assert [r.record.id for r in again.reviewed("p", record_id="older-writer")] == [
        "older-writer"]
    again.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("decisions")
    project = Project.create(root / "toy", tiny_vocab(), "test-overlap", {})
    project.train(tiny_records(40))
    tokens = TokenStore(root / "tokens.toml")
    token = tokens.add("catalogue")
    project = Project.load(root / "toy", serving=ServingSettings(allow_learn=True))
    client = TestClient(create_app({"toy": project}, FeedbackStore.for_project(root / "toy"),
                                   tokens=TokenStore.read(tokens.path)),
                        base_url="http://localhost")
    client.headers["Authorization"] = f"Bearer {token}"
    res = client.post("/tagalign/v1/projects/toy/learn", json={"records": [
        {"id": "(DE-101)77", "title": "Pilze", "language": "de", "subjects": [PILZE, HOLZ],
         "rejected": [EPOS], "added": [HOLZ]}]})
    assert res.status_code == 200, res.text
    return client


def test_decisions_route_streams_marc_and_needs_a_token(served):
    url = "/tagalign/v1/projects/toy/decisions"
    no_token = served.get(url, headers={"Authorization": ""})
    assert no_token.status_code == 401 and "API token" in no_token.json()["detail"]
    res = served.get(url)
    assert res.status_code == 200
    assert res.headers["content-type"].startswith("application/marcxml+xml")
    assert 'filename="toy-decisions.xml"' in res.headers["content-disposition"]
    [rec] = _pymarc(res.content)
    assert _fields(rec) == [("001", "77"), ("003", "DE-101"), subject(1, PILZE, "Pilze"),
                            subject(2, HOLZ, "Holzschutz"), confirmed(1, "DE-101"),
                            intellectual(2, "DE-101")]
    binary_res = served.get(url, params={"format": "marc", "agency": "DE-X"})
    assert binary_res.headers["content-type"] == "application/marc"
    assert _pymarc(binary_res.content)[0].get_fields("883")[1]["q"] == "DE-X"
    lines = served.get(url, params={"format": "jsonl"}).text.splitlines()
    assert [json.loads(line)["subjects"] for line in lines] == [[PILZE, HOLZ]]
    tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).date().isoformat()
    assert _pymarc(served.get(url, params={"since": tomorrow}).content) == []
    bad = served.get(url, params={"since": "gestern"})
    assert bad.status_code == 400 and "ISO date" in bad.json()["detail"]
    assert served.get(url, params={"format": "csv"}).status_code == 422
    assert served.get("/tagalign/v1/projects/nope/decisions").status_code == 404
    doc = served.get("/openapi.json").json()["paths"][url.replace("toy", "{project_id}")]
    assert doc["get"]["security"] == [{"bearer": []}]
    assert set(doc["get"]["responses"]["200"]["content"]) == {
        "application/marcxml+xml", "application/marc", "application/x-ndjson"}


def test_learn_refuses_added_subjects_it_was_not_told_the_decision_of(served):
    res = served.post("/tagalign/v1/projects/toy/learn", json={"records": [
        {"id": "x", "title": "Pilze", "subjects": [PILZE], "added": [HOLZ]}]})
    assert res.status_code == 422 and "added names subjects neither" in res.text
