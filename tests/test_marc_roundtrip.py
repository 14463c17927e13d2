"""The catalogue loop closed through a real server (issue 47): catalogue records in MARC
go into the review queue of a `tagalign serve` subprocess (tokens, ``--allow-learn``), a
librarian's decisions (suggestions accepted and rejected, a subject added by search) are
made through the HTTP API, and what comes back — from the decisions route and from
`tagalign feedback export` — is read with pymarc: its 650/883 fields are exactly those
decisions, with the provenance of each kind, and ``--merge`` returns the catalogue's own
fields byte for byte."""

from __future__ import annotations

import datetime as dt
import io
import shutil

import httpx
import pytest
from pymarc import MARCReader, parse_xml_to_array
from typer.testing import CliRunner

from marc_fixtures import binary, dnb_record, f, plain_record, xml
from serving import ServeProcess
from tagalign.cli import app
from tagalign.records import read_records
from tagalign.records.marc.provenance import CONFIRMED_PROCESS
from tagalign.serve.tokens import TokenStore

API = "/tagalign/v1/projects/tiny"
EPOS, ZUKUNFT = "4015065-3", "4068097-6"
runner = CliRunner()


def catalogue() -> list:
    """Two records as a catalogue holds them: DNB's (with people's and a machine's
    subjects, `dnb_record`) and one about an epic without subjects."""
    epic = plain_record("555", "Epos und Held", "DE-101")
    epic.add_field(f("520", "  ", "a", "epic hero poem saga verse heroic song"))
    return [dnb_record(), epic]


def _pymarc(data: bytes) -> list:
    return parse_xml_to_array(io.BytesIO(data)) if data.lstrip().startswith(b"<") \
        else list(MARCReader(data))


def _fields(rec) -> list[tuple]:
    return [(fl.tag, fl.data) if fl.control_field else
            (fl.tag, "".join(fl.indicators), [(s.code, s.value) for s in fl.subfields])
            for fl in rec.fields]


@pytest.fixture(scope="module")
def loop(tiny_hybrid, tmp_path_factory):
    """The server with the queue loaded from MARC-XML, and the decisions made on it."""
    root = tmp_path_factory.mktemp("roundtrip")
    project = shutil.copytree(tiny_hybrid, root / "tiny")
    (root / "catalogue.xml").write_bytes(xml(catalogue()))
    token = TokenStore(root / "tokens.toml").add("librarian")
    srv = ServeProcess(str(project), "--allow-learn", "--no-compile-ranker", "--queue",
                       str(root / "catalogue.xml"), "--tokens-file", str(root / "tokens.toml"),
                       log=root / "serve.log")
    try:
        srv.wait_ready("tiny")
        http = httpx.Client(base_url=srv.url, timeout=60,
                            headers={"Authorization": f"Bearer {token}"})
        decided = {}
        for position in (0, 1):
            item = http.get(f"{API}/queue/{position}").json()["record"]
            got = http.post(f"{API}/suggest", json={
                "title": item["title"], "abstract": item["abstract"],
                "language": item["language"], "limit": 3}).json()["results"]
            suggested = [s["id"] for s in got]
            assert len(suggested) == 3, got
            if position == 0:  # accept two, reject one, add one found by search
                [found] = http.get(f"{API}/subjects", params={"prefix": "Zukunft"}).json()[
                    "subjects"]
                assert found["id"] == ZUKUNFT and ZUKUNFT not in suggested
                body = {"subjects": [*suggested[:2], ZUKUNFT], "rejected": suggested[2:],
                        "added": [ZUKUNFT]}
            else:  # nothing fits
                body = {"subjects": [], "rejected": suggested}
            res = http.post(f"{API}/learn", json={"records": [
                {"id": item["id"], "title": item["title"], "abstract": item["abstract"],
                 "language": item["language"], **body}]})
            assert res.status_code == 200, res.text
            assert http.post(f"{API}/queue/{position}/finish", json={}).status_code == 200
            decided[item["id"]] = body | {"suggested": suggested}
        yield srv, http, root, decided
        http.close()  # no connection kept alive for the server to wait on
    finally:
        srv.stop()


def test_queue_from_marc_keeps_control_numbers(loop):
    srv, http, _, decided = loop
    assert list(decided) == ["(DE-101)1234567890", "(DE-101)555"]
    assert http.get(f"{API}/queue").json()["position"] is None  # both finished


def test_decisions_route_holds_exactly_the_decisions(loop):
    srv, http, root, decided = loop
    first, second = decided.values()
    no_token = httpx.get(f"{srv.url}{API}/decisions", timeout=30)
    assert no_token.status_code == 401
    res = http.get(f"{API}/decisions", params={"since": dt.date.today().isoformat()})
    assert res.status_code == 200 and res.headers["content-type"].startswith(
        "application/marcxml+xml")
    dnb, epic = _pymarc(res.content)
    today = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    accepted = first["subjects"]
    assert [fl.tag for fl in dnb.fields] == ["001", "003", "650", "650", "650", "883", "883",
                                             "883"]
    assert (dnb["001"].data, dnb["003"].data) == ("1234567890", "DE-101")
    # each accepted subject a 650 linked to its 883; rejected suggestions not written
    subjects = dnb.get_fields("650")
    assert [(fl.indicators, fl["8"], fl.get_subfields("0"), fl["2"]) for fl in subjects] == [
        ((" ", "7"), f"{i}\\p", [f"(DE-588){sid}", f"https://d-nb.info/gnd/{sid}"], "gnd")
        for i, sid in enumerate(accepted, 1)]
    assert all(fl["a"] for fl in subjects) and subjects[2]["a"] == "Zukunft"
    # two suggestions accepted: confirmed (1_); one found by search: intellectual (2_)
    assert [_fields_of(n) for n in dnb.get_fields("883")] == [
        ("1 ", "1\\p", CONFIRMED_PROCESS, today, "DE-101"),
        ("1 ", "2\\p", CONFIRMED_PROCESS, today, "DE-101"),
        ("2 ", "3\\p", "dnb", today, "DE-101")]
    # the second record: reviewed, every suggestion rejected: its control number alone
    assert _fields(epic) == [("001", "555"), ("003", "DE-101")]
    tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).date().isoformat()
    assert _pymarc(http.get(f"{API}/decisions", params={"since": tomorrow}).content) == []
    # the CLI writes the same bytes from the same store
    out = root / "export.xml"
    res = runner.invoke(app, ["feedback", "export", str(root / "tiny"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == http.get(f"{API}/decisions").content
    # read back by tagalign: the librarian's own subject is gold
    assert ZUKUNFT in next(read_records(out)).subjects


def _fields_of(note) -> tuple:
    return ("".join(note.indicators), note["8"], note["a"], note["d"], note["q"])


def test_merge_returns_the_catalogue_records_with_the_decisions_added(loop):
    srv, http, root, decided = loop
    first = next(iter(decided.values()))
    (root / "catalogue.mrc").write_bytes(binary(catalogue()))
    out = root / "merged.mrc"
    res = runner.invoke(app, ["feedback", "export", str(root / "tiny"), "--out", str(out),
                              "--merge", str(root / "catalogue.mrc")])
    assert res.exit_code == 0, res.output
    before = _pymarc(binary(catalogue()))
    merged = _pymarc(out.read_bytes())
    assert len(merged) == 2
    # the catalogue's fields byte for byte, in their order
    for old, new in zip(before, merged, strict=True):
        ours = [fl for fl in new.fields if fl.tag in ("650", "883") and fl.get("8") and
                int(fl["8"].split("\\")[0]) > 2]
        assert [fl.as_marc("utf-8") for fl in new.fields if fl not in ours] == [
            fl.as_marc("utf-8") for fl in old.fields]
    # the DNB record held some accepted subjects already: only the others are added, their
    # links after the two it uses
    held = {*next(read_records(root / "catalogue.mrc")).subjects,
            *next(read_records(root / "catalogue.mrc")).machine_subjects}
    new = [s for s in first["subjects"] if s not in held]
    assert ZUKUNFT in new
    added = [fl for fl in merged[0].get_fields("650") if fl.get("8") in
             {f"{i}\\p" for i in range(3, 3 + len(new))}]
    assert [fl.get_subfields("0")[0] for fl in added] == [f"(DE-588){s}" for s in new]
    notes = {n["8"]: n for n in merged[0].get_fields("883")}
    assert [notes[fl["8"]].indicators.first for fl in added] == [
        "2" if s == ZUKUNFT else "1" for s in new]
    assert _fields(merged[1]) == _fields(before[1])  # nothing accepted: as it was


def test_machine_suggestions_are_machine_made_and_not_gold(loop, tmp_path):
    """What `suggest --format marc` writes, nobody reviewed: 883 0_, read back as the
    machine's, left out of the gold subjects (training reads those)."""
    _, _, root, _ = loop
    (tmp_path / "catalogue.mrc").write_bytes(binary(catalogue()[1:]))
    out = tmp_path / "suggested.mrc"
    res = runner.invoke(app, ["suggest", str(root / "tiny"), "--input",
                              str(tmp_path / "catalogue.mrc"), "--output", str(out),
                              "--format", "marc", "--limit", "2", "--no-compile-ranker",
                              "--jobs", "1"])
    assert res.exit_code == 0, res.output
    [rec] = _pymarc(out.read_bytes())
    notes = rec.get_fields("883")
    assert len(notes) == 2 and {(n.indicators.first, n["a"]) for n in notes} == {
        ("0", "maschinell gebildet")}
    [back] = read_records(out)
    assert back.subjects == [] and EPOS in back.machine_subjects
