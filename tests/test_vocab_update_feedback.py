"""The feedback store follows the vocabulary (issue 65): decisions stored before
`tagalign vocab update` are read as the updated vocabulary stands, in the tiny trained
hybrid's own SQLite store — exported (MARC-XML, JSONL, over HTTP: a redirected heading's
decision as its target's, once, a deleted or split one's left out and counted), shown by
the review queue, and learned by the next training; Annif's ``/v1/projects/{id}``
describes the vocabulary's state (the real `annif-client` against a real server)."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import httpx
import pytest
from annif_client import AnnifClient
from pymarc import parse_xml_to_array
from typer.testing import CliRunner

from marc_authority import write_xml
from marc_fixtures import binary, plain_record, write
from serving import LiveServer
from tagalign.cli import app
from tagalign.feedback import ADDED, Decision, FeedbackStore
from tagalign.feedback.follow import Followed, follow_decisions, follow_reviewed
from tagalign.feedback.schema import Reviewed
from tagalign.project import Project
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.serve.queue import RecordQueue
from tagalign.shipping.vocab_update import update_vocabulary
from test_vocab_update import DENKMAL, HOLZSCHUTZ, PILZE, ZUKUNFT, week
from tiny_models import tiny_records

runner = CliRunner()
EPOS = "4015065-3"
RETIRED = (PILZE, ZUKUNFT, DENKMAL)
A = Record(id="(DE-101)111", title="Pilze am Fachwerk", language="de")
B = Record(id="222", title="Hausschwamm", abstract="fungi timber", language="de")
C = Record(id="333", title="Denkmalpflege", language="de")


@pytest.fixture
def decided(tiny_hybrid_copy, tmp_path) -> Path:
    """The tiny hybrid with decisions in its own store on Pilze (since redirected to
    Holzschutz), Zukunft (since deleted) and Denkmalpflege (since split)."""
    store = FeedbackStore.for_project(tiny_hybrid_copy)
    store.add(tiny_hybrid_copy.name, [
        # both the old id and its target accepted: one subject after the update
        Decision(A, [PILZE, HOLZSCHUTZ, EPOS], [ZUKUNFT]),
        Decision(B, [ZUKUNFT, PILZE], added=[PILZE]),
        Decision(C, [DENKMAL])])
    store.close()
    return tiny_hybrid_copy


def update(path: Path, tmp_path: Path) -> None:
    update_vocabulary(path, [write_xml(tmp_path / "week_20240702.mrc.xml", week())])


def exported(path: Path, out: Path, *args: str) -> tuple[str, list]:
    res = runner.invoke(app, ["feedback", "export", str(path), "--out", str(out), *args])
    assert res.exit_code == 0, res.output
    data = out.read_bytes()
    return res.output, (parse_xml_to_array(io.BytesIO(data)) if out.suffix == ".xml" else
                        [json.loads(line) for line in data.decode().splitlines()])


def subjects(rec) -> list[tuple[str, str, str]]:
    """Each 650's GND id, label and the indicators of the 883 its $8 links to."""
    notes = {f["8"]: "".join(f.indicators) for f in rec.get_fields("883")}
    return [(f.get_subfields("0")[0].removeprefix("(DE-588)"), f["a"], notes[f["8"]])
            for f in rec.get_fields("650")]


def test_the_export_writes_targets_and_leaves_retired_ids_out(decided, tmp_path):
    _, before = exported(decided, tmp_path / "before.xml")
    assert [r["001"].data for r in before] == ["111", "222", "333"]
    assert [s[0] for s in subjects(before[0])] == [PILZE, HOLZSCHUTZ, EPOS]
    update(decided, tmp_path)
    out, after = exported(decided, tmp_path / "after.xml")
    assert "2 decided subjects written as the targets of redirected headings, 2 of deleted " \
           "or split headings left out" in " ".join(out.split())
    assert [r["001"].data for r in after] == ["111", "222", "333"]
    # Pilze and Holzschutz both accepted: Holzschutz once, in Pilze's place, its own origin
    assert subjects(after[0]) == [(HOLZSCHUTZ, "Holzschutz", "1 "), (EPOS, "Epos", "1 ")]
    # a heading a librarian found by search stays intellectual under its target
    assert subjects(after[1]) == [(HOLZSCHUTZ, "Holzschutz", "2 ")]
    assert subjects(after[2]) == []  # reviewed, its one subject split: nothing to add
    text = (tmp_path / "after.xml").read_text("utf-8")
    assert not [sid for sid in RETIRED if sid in text]
    # into the catalogue's own records: the target added beside what the record holds
    catalogue = write(tmp_path / "catalogue.mrc", binary([plain_record("222", "Hausschwamm")]))
    _, (merged,) = exported(decided, tmp_path / "merged.xml", "--merge", str(catalogue))
    assert merged["245"]["a"] == "Hausschwamm"
    assert subjects(merged) == [(HOLZSCHUTZ, "Holzschutz", "2 ")]
    # the training JSONL alike; a record left with nothing accepted is not written
    _, rows = exported(decided, tmp_path / "after.jsonl")
    assert [(r["id"], r["subjects"]) for r in rows] == [
        (A.id, [HOLZSCHUTZ, EPOS]), (B.id, [HOLZSCHUTZ])]
    # from the store's file, the vocabulary named
    _, rows = exported(decided / "feedback.sqlite", tmp_path / "file.jsonl",
                       "--project", decided.name, "--vocab", str(decided))
    assert [r["subjects"] for r in rows] == [[HOLZSCHUTZ, EPOS], [HOLZSCHUTZ]]
    # the store itself keeps what the librarians gave
    store = FeedbackStore.for_project(decided)
    assert store.latest_decisions(decided.name, B.id) == {ZUKUNFT: "accept", PILZE: "accept"}
    store.close()


def test_the_decisions_route_and_the_queue_read_the_targets(decided, tmp_path):
    update(decided, tmp_path)
    project = Project.load(decided)
    store = FeedbackStore.for_project(decided)
    review = RecordQueue([A, B, C], estimate=None, name="week.jsonl")
    with LiveServer(create_app({decided.name: project}, store, review=review)) as srv:
        base = f"{srv.url}/tagalign/v1/projects/{decided.name}"
        res = httpx.get(f"{base}/decisions", params={"format": "jsonl"}, timeout=30)
        assert res.status_code == 200, res.text
        assert [(r["id"], r["subjects"]) for r in map(json.loads, res.text.splitlines())] == [
            (A.id, [HOLZSCHUTZ, EPOS]), (B.id, [HOLZSCHUTZ])]
        marc = httpx.get(f"{base}/decisions", timeout=30).text
        assert HOLZSCHUTZ in marc and not [sid for sid in RETIRED if sid in marc]
        a, b, c = (httpx.get(f"{base}/queue/{i}", timeout=30).json() for i in range(3))
    # accepted Holzschutz once, Zukunft's rejection gone with it; labels of the targets
    assert a["decisions"] == {HOLZSCHUTZ: "accept", EPOS: "accept"}
    assert a["labels"] == {HOLZSCHUTZ: "Holzschutz", EPOS: "Epos"}
    assert (b["decisions"], b["added"]) == ({HOLZSCHUTZ: "accept"}, [HOLZSCHUTZ])
    assert (c["decisions"], c["labels"], c["added"]) == ({}, {}, [])


def test_training_with_feedback_learns_the_targets(decided, tmp_path):
    from tagalign.workflows import train_project

    update(decided, tmp_path)
    project = Project.load(decided)
    records = tiny_records(120, seed=0)
    mapped = sum(PILZE in r.subjects for r in records)
    dropped = sum(s in (ZUKUNFT, DENKMAL) for r in records for s in r.subjects)
    done = train_project(project, records, feedback=True)
    assert done.confirmed == 3 and done.records == 123
    # A and B each had Pilze; B Zukunft, C Denkmalpflege
    assert (done.gold_mapped, done.gold_dropped) == (mapped + 2, dropped + 2)
    Y = project.trained_recipe().pipeline.memory.Y.tocsc()
    holz = Y[:, project.vocab.position(HOLZSCHUTZ)]
    # each record holding Pilze or Holzschutz learns Holzschutz once, A and B too
    assert holz.nnz == sum(bool({PILZE, HOLZSCHUTZ} & set(r.subjects)) for r in records) + 2
    assert holz.max() == 1
    assert all(Y[:, project.vocab.position(s)].nnz == 0 for s in RETIRED)


def test_annif_s_project_description_shows_the_vocabulary_state(tiny_hybrid_copy, tmp_path):
    path = tiny_hybrid_copy

    def described() -> tuple[dict, dict]:
        store = FeedbackStore.for_project(path)
        with LiveServer(create_app({"tiny": Project.load(path)}, store)) as srv:
            client = AnnifClient(api_base=f"{srv.url}/v1/")
            return (client.get_project("tiny"),
                    httpx.get(f"{srv.url}/v1/vocabs", timeout=30).json())

    before, _ = described()
    assert set(before["vocab"]) == {"vocab_id", "languages", "size", "loaded"}
    assert before["vocab"]["size"] == 8
    update(path, tmp_path)
    state = Project.load(path).config.vocabulary["state"]
    after, vocabs = described()
    assert after["vocab"]["state"] == state and state["counts"]["suggestable"] == 6
    assert after["vocab"]["state"]["last_date"] == "2024-07-02"
    assert {k: after["vocab"][k] for k in ("languages", "size", "loaded")} == {
        "languages": ["de", "en"], "size": 6, "loaded": True}  # 9, 3 of them retired
    assert vocabs == {"vocabs": [after["vocab"]]}


def test_following_merges_and_counts():
    item = Reviewed("p", Record(id="r", title="t", subjects=[PILZE, EPOS, HOLZSCHUTZ, ZUKUNFT]),
                    {PILZE: ADDED, EPOS: "suggested", HOLZSCHUTZ: "suggested",
                     ZUKUNFT: "suggested"}, [PILZE, ZUKUNFT, DENKMAL],
                    dt.datetime(2026, 12, 1, tzinfo=dt.UTC))

    def now(sid: str) -> str | None:
        return {PILZE: HOLZSCHUTZ, ZUKUNFT: None}.get(sid, sid)

    done = Followed()
    got = follow_reviewed(item, now, done)
    assert got.record.subjects == [HOLZSCHUTZ, EPOS]
    assert got.origins == {HOLZSCHUTZ: "suggested", EPOS: "suggested"}  # the target's own
    assert got.rejected == [DENKMAL] and (done.mapped, done.dropped) == (1, 1)
    plain = Reviewed("p", Record(id="r", title="t", subjects=[EPOS]), {EPOS: "suggested"},
                     [HOLZSCHUTZ], item.decided)
    assert follow_reviewed(plain, now) is plain
    assert follow_decisions({PILZE: "accept", HOLZSCHUTZ: "reject", ZUKUNFT: "accept",
                             EPOS: "reject"}, now) == {HOLZSCHUTZ: "accept", EPOS: "reject"}
