"""Bad input never loses a run: per-line decoding, cut-off compressed files (issue 12)."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from tagalign.io import LineReader, parse_lines
from tagalign.predictions import read_predictions
from tagalign.records import BadInputError, InputReport, read_records


def _rec(i: int) -> dict:
    return {"id": f"r{i}", "title": f"Titel {i}", "abstract": "", "lang": "de"}


def _mixed_bytes() -> bytes:
    """The issue's file: a good record, broken JSON, a line holding the byte 0xff."""
    good = json.dumps(_rec(1)).encode()
    bad_byte = json.dumps(_rec(3)).encode().replace(b"Titel", b"Ti\xfftel")
    return b"\n".join([good, b'{"id": "r2", "title": "bro', bad_byte,
                       json.dumps(_rec(4)).encode()]) + b"\n"


def test_each_bad_line_is_reported_with_path_line_and_reason(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(_mixed_bytes())
    report = InputReport(stream=io.StringIO())
    assert [r.id for r in read_records(path, report=report)] == ["r1", "r4"]
    assert report.n_skipped == 2 and report.records_read == 2
    assert report.skipped[0].startswith(f"{path}:2: ")
    assert report.skipped[1] == f"{path}:3: not valid UTF-8 (byte 0xff at column 26)"
    with pytest.raises(BadInputError, match=f"{path}:2: "):
        list(read_records(path, report=InputReport(strict=True)))


def test_cut_off_gzip_keeps_the_records_before_the_cut(tmp_path):
    data = gzip.compress("".join(json.dumps(_rec(i)) + "\n" for i in range(3000)).encode())
    path = tmp_path / "records.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    report = InputReport(stream=io.StringIO())
    ids = [r.id for r in read_records(path, report=report)]
    n = len(ids)
    assert 100 < n < 3000 and ids == [f"r{i}" for i in range(n)]
    assert report.skipped == [f"{path}: compressed data ends early after {n} records"]
    with pytest.raises(BadInputError, match="compressed data ends early"):
        list(read_records(path, report=InputReport(strict=True)))


def test_corrupt_gzip_and_overlong_lines_are_reported_not_raised(tmp_path):
    data = bytearray(gzip.compress(b"".join(b'{"a": %d}\n' % i for i in range(5000))))
    data[len(data) // 2] ^= 0xFF  # flip one byte in the middle of the deflate stream
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(bytes(data))
    report = InputReport(stream=io.StringIO())
    got = list(parse_lines(path, report, lambda t, n: json.loads(t)["a"]))
    # the lines before the damage come out in order; the damage is reported, never raised
    assert len(got) > 100 and got[:100] == list(range(100))
    assert report.skipped[-1].startswith(f"{path}: compressed data is corrupt")

    long = tmp_path / "long.txt"
    long.write_bytes(b"ok 1\n" + b"x" * 5000 + b"\nok 2\n" + b"y" * 5000)
    report = InputReport(stream=io.StringIO())
    reader = LineReader(long, report, max_line_bytes=1000)
    assert list(reader) == [(1, "ok 1"), (3, "ok 2")]
    assert report.skipped == [f"{long}:2: line longer than 1000 bytes",
                              f"{long}:4: line longer than 1000 bytes"]


def test_crlf_bom_and_blank_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_rec(1)).encode() + b"\r\n\r\n  \n"
                     + json.dumps(_rec(2)).encode())
    report = InputReport(stream=io.StringIO())
    assert [r.id for r in read_records(path, report=report)] == ["r1", "r2"]
    assert report.n_skipped == 0


def test_predictions_with_bad_bytes_and_cut_off_gzip(tmp_path):
    lines = [json.dumps({"id": f"r{i}", "subjects": ["4015065-3"]}).encode() for i in range(4)]
    lines[2] = lines[2].replace(b"r2", b"r\xff2")
    path = tmp_path / "pred.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = InputReport(stream=io.StringIO())
    assert sorted(read_predictions(path, report)) == ["r0", "r1", "r3"]
    assert report.skipped == [f"{path}:3: not valid UTF-8 (byte 0xff at column 10)"]

    data = gzip.compress(b"".join(json.dumps({"id": f"r{i}", "subjects": []}).encode() + b"\n"
                                  for i in range(4000)))
    gz = tmp_path / "pred.jsonl.gz"
    gz.write_bytes(data[: len(data) // 2])
    report = InputReport(stream=io.StringIO())
    n = len(read_predictions(gz, report))
    assert 0 < n < 4000
    assert report.skipped == [f"{gz}: compressed data ends early after {n} predictions"]


def test_annif_tsv_records_skip_bad_bytes(tmp_path):
    path = tmp_path / "docs.tsv"
    path.write_bytes(b"Epen\t<http://d-nb.info/gnd/4015065-3>\nKaf\xfffee\tx\nRoman\t\n")
    report = InputReport(stream=io.StringIO())
    recs = list(read_records(path, report=report))
    assert [(r.id, r.title) for r in recs] == [("docs:1", "Epen"), ("docs:3", "Roman")]
    assert report.skipped == [f"{path}:2: not valid UTF-8 (byte 0xff at column 4)"]


def test_jsonld_tree_keeps_going_past_bad_files(tmp_path, shared_data):
    import shutil

    tree = tmp_path / "dev"
    shutil.copytree(shared_data / "llms4subjects/jsonld-sample", tree)
    files = sorted(tree.rglob("*.jsonld"))
    files[0].write_bytes(files[0].read_bytes().replace(b"{", b"{\n\xff", 1))
    files[1].write_bytes(b"{not json")
    files[2].write_bytes(b"[" * 100_000)  # nested too deeply for the JSON parser
    report = InputReport(stream=io.StringIO())
    recs = list(read_records(tree, report=report))
    assert [r.id for r in recs] == [f.stem for f in files[3:]]
    assert report.skipped == [f"{files[0]}:2: not valid UTF-8 (byte 0xff at column 1)",
                              f"{files[1]}:1: Expecting property name enclosed in double quotes",
                              f"{files[2]}: nested too deeply"]


def test_vocabulary_formats_skip_bad_lines_and_entries(tmp_path):
    from tagalign.vocab import load_vocabulary

    def load(name: str, data: bytes):
        path = tmp_path / name
        path.write_bytes(data)
        report = InputReport(stream=io.StringIO())
        return path, load_vocabulary(path, report=report).ids, report.skipped

    path, ids, skipped = load("v.tsv", b"gnd_id\tlabel_de\n1-1\tA\n2-2\tB\xff\n3-3\tC\n")
    assert ids == ["1-1", "3-3"]
    assert skipped == [f"{path}:3: not valid UTF-8 (byte 0xff at column 6)"]

    path, ids, skipped = load("a.tsv", b"<http://d-nb.info/gnd/1-1>\tA\nnolabel\n"
                                       b"<x:\xff>\tB\n<http://d-nb.info/gnd/3-3>\tC\n")
    assert ids == ["1-1", "3-3"]
    assert [s.split(": ")[0] for s in skipped] == [f"{path}:2", f"{path}:3"]

    path, ids, skipped = load("s.yaml", b'- id: "http://d-nb.info/gnd/1-1"\n  subject: "A"\n'
                                        b'- id: "http://d-nb.info/gnd/2-2"\n  subject: [x\n'
                                        b'- id: "http://d-nb.info/gnd/3-3"\n  subject: "C"\n')
    assert ids == ["1-1", "3-3"] and [s.split(": ")[0] for s in skipped] == [f"{path}:4"]

    entries = [{"Code": f"{i}-1", "Name": f"N{i}", "Related Subjects": [{"Code": "9-9"}]}
               for i in range(5)]
    raw = json.dumps(entries, indent=2).encode().replace(b'"N3"', b'"N3')  # a broken entry
    path, ids, skipped = load("g.json", raw.replace(b'"N1"', b'"N\xff1"'))
    assert ids == ["0-1", "2-1", "4-1"]
    assert len(skipped) == 3 and "not valid UTF-8" in skipped[0]

    ttl = (b"@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n"
           b'<http://d-nb.info/gnd/1-1> a skos:Concept ; skos:prefLabel "A"@de .\n'
           b'<http://d-nb.info/gnd/2-2> a skos:Concept ; skos:prefLabel "B"@de ;;; ! .\n'
           b'<http://d-nb.info/gnd/3-3> a skos:Concept ;\n  skos:prefLabel "C"@de .\n'
           b'<http://d-nb.info/gnd/4-4> a skos:Concept ; skos:prefLabel "\xff"@de .\n')
    path, ids, skipped = load("v.ttl", ttl)
    assert ids == ["1-1", "3-3"]
    assert [s.split(": ")[0] for s in skipped] == [f"{path}:6", f"{path}:3"]


def test_cut_off_gzip_vocabulary(tmp_path):
    from tagalign.vocab import load_vocabulary

    body = "gnd_id\tlabel_de\n" + "".join(f"{i}-0\tLabel {i}\n" for i in range(20000))
    data = gzip.compress(body.encode())
    path = tmp_path / "gnd-subjects.tsv.gz"
    path.write_bytes(data[: len(data) // 2])
    report = InputReport(stream=io.StringIO())
    n = len(load_vocabulary(path, report=report))
    assert 1000 < n < 20000
    assert report.skipped == [f"{path}: compressed data ends early after {n} subjects"]


def test_the_report_logs_its_warnings_and_returns_its_summary_printing_nothing(
        capsys, caplog, monkeypatch):
    import logging

    from tagalign.errors import InputError
    from tagalign.io import LineError
    from tagalign.io.report import log

    # the CLI's console handlers, if a test in this process ran a command: on this logger
    # and on its parents below the root (where caplog listens)
    parts = log.name.split(".")
    for depth in range(1, len(parts) + 1):
        logger = logging.getLogger(".".join(parts[:depth]))
        monkeypatch.setattr(logger, "handlers", [])
        monkeypatch.setattr(logger, "propagate", True)
    report = InputReport(max_shown=1)
    assert report.end_summary() is None  # nothing skipped: nothing to say
    with caplog.at_level(logging.WARNING, logger=log.name):
        report.bad("f.jsonl:2", "broken")
        report.bad("f.jsonl:3", "broken")
    assert caplog.messages == ["skipped f.jsonl:2: broken"]
    assert capsys.readouterr() == ("", "")
    assert report.end_summary() == "0 records read; 2 malformed items skipped"
    for error in (BadInputError, LineError):
        assert issubclass(error, InputError) and issubclass(error, ValueError)


def test_the_cli_shows_the_warnings_and_the_summary_on_stderr(tmp_path):
    from typer.testing import CliRunner

    from tagalign.cli import app

    path = tmp_path / "mixed.jsonl"
    path.write_bytes(_mixed_bytes())
    res = CliRunner().invoke(app, ["records", "stats", str(path)])
    assert res.exit_code == 0, res.output
    assert f"warning: skipped {path}:2: " in res.stderr
    assert f"warning: skipped {path}:3: not valid UTF-8" in res.stderr
    assert "2 records read; 2 malformed items skipped\n" in res.stderr
    assert "warning" not in res.stdout


# MARC 21 (issue 32): a broken record is named by file and position and skipped, the rest
# kept — in binary MARC (cut off mid-file, a bad leader length, bad bytes) and in MARC-XML
# (a broken tag, a record cut off, a record outside the rules), gzip or not.

def _marc_records(n: int):
    from marc_fixtures import plain_record

    return [plain_record(str(i), f"Titel {i}") for i in range(1, n + 1)]


def _marc_ids(path, report):
    return [r.id for r in read_records(path, report=report)]


def test_binary_marc_record_cut_off_mid_file(tmp_path):
    from marc_fixtures import binary

    data = binary(_marc_records(3))
    path = tmp_path / "cut.mrc"
    path.write_bytes(data[:-20])
    report = InputReport(stream=io.StringIO())
    assert _marc_ids(path, report) == ["1", "2"]
    start = len(binary(_marc_records(2)))
    assert report.skipped == [f"{path}: record 3 (byte {start}): cut off: the file ends "
                              f"{len(data) - 20 - start} bytes into the record, before its "
                              "end-of-record mark"]
    with pytest.raises(BadInputError, match="record 3"):
        list(read_records(path, report=InputReport(strict=True)))


def test_binary_marc_bad_leader_length_and_bad_bytes_cost_one_record_each(tmp_path):
    from marc_fixtures import binary

    recs = [binary([r]) for r in _marc_records(5)]
    recs[1] = b"99999" + recs[1][5:]  # a leader length that is not the record's
    recs[3] = recs[3].replace(b"Titel 4", b"Titel \xff")  # not UTF-8
    path = tmp_path / "bad.mrc.gz"
    path.write_bytes(gzip.compress(b"".join(recs)))
    report = InputReport(stream=io.StringIO())
    assert _marc_ids(path, report) == ["1", "3", "5"]
    second, fourth = len(recs[0]), sum(map(len, recs[:3]))
    assert report.skipped[0] == (
        f"{path}: record 2 (byte {second}): the leader gives a length of 99999 bytes, but "
        f"the record has {len(recs[1])} up to its end-of-record mark")
    assert report.skipped[1].startswith(f"{path}: record 4 (byte {fourth}): ")
    assert "not valid UTF-8" in report.skipped[1] and len(report.skipped) == 2


def test_cut_off_gzip_marc_keeps_the_records_before_the_cut(tmp_path):
    from marc_fixtures import binary

    data = gzip.compress(binary(_marc_records(3000)))
    path = tmp_path / "r.mrc.gz"
    path.write_bytes(data[: len(data) // 2])
    report = InputReport(stream=io.StringIO())
    ids = _marc_ids(path, report)
    assert 100 < len(ids) < 3000 and ids == [str(i) for i in range(1, len(ids) + 1)]
    assert report.skipped == [f"{path}: compressed data ends early after {len(ids)} records"]


def test_broken_marc_xml_record_is_named_by_line_and_the_rest_kept(tmp_path):
    from marc_fixtures import record_xml, sru

    recs = [record_xml(r) for r in _marc_records(4)]
    recs[1] = recs[1].replace("</subfield>", "</subfeld>", 1)  # a broken tag
    text = ('<?xml version="1.0" encoding="UTF-8"?>\n<collection xmlns="http://www.loc.gov/'
            'MARC21/slim">\n' + "\n".join(recs) + "\n</collection>\n")
    path = tmp_path / "r.xml"
    path.write_text(text, encoding="utf-8")
    report = InputReport(stream=io.StringIO())
    assert _marc_ids(path, report) == ["1", "3", "4"]
    (skipped,) = report.skipped
    assert skipped.startswith(f"{path}:4: record 2: broken XML (mismatched tag at line 4, "
                              "column ")

    # inside an SRU response: the same, and the SRU wrapper of the next record is reopened
    data = sru(_marc_records(4)).replace(b"Titel 2</subfield>", b"Titel 2</subfeld>")
    path = tmp_path / "sru.xml"
    path.write_bytes(data)
    report = InputReport(stream=io.StringIO())
    assert _marc_ids(path, report) == ["1", "3", "4"]
    assert len(report.skipped) == 1 and ": record 2: broken XML (mismatched tag" in \
        report.skipped[0]


def test_marc_xml_cut_off_and_records_outside_the_rules(tmp_path):
    from marc_fixtures import record_xml

    recs = [record_xml(r) for r in _marc_records(4)]
    recs[0] = recs[0].replace('tag="245"', 'tag="24"')  # not a tag
    recs[1] = recs[1].replace('<controlfield tag="001">2</controlfield>', "")  # no id
    text = "<collection>\n" + "\n".join(recs)
    path = tmp_path / "cut.xml"
    path.write_text(text[: text.rindex("<subfield")], encoding="utf-8")
    report = InputReport(stream=io.StringIO())
    assert _marc_ids(path, report) == ["3"]
    assert report.skipped == [
        f"{path}:2: record 1: datafield tag '24' is not three letters or digits",
        f"{path}:3: record 2: no control number (001) and no 035 $a",
        f"{path}:5: record 4: cut off: the file ends inside it"]
