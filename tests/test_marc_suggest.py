"""MARC 21 through the commands (issue 32): suggestions out as DNB writes machine subjects
(650 linked to 883), ``--merge`` keeping the input records whole, resume; ``train``,
``eval`` and batch on MARC input. A lexical project on the tiny vocabulary tags instantly."""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path

import pytest
from pymarc import MARCReader, parse_xml_to_array
from typer.testing import CliRunner

from marc_fixtures import binary, dnb_record
from tagalign.cli import app
from tagalign.predictions import MarcPredictionStream, partial_path
from tagalign.project import Project
from tagalign.records import InputReport, Record, read_records
from tagalign.records.marc.writer import MarcWriter, parse_score, record_to_marc
from tagalign.suggest import Suggestion
from tiny_models import tiny_records, tiny_vocab, write_tiny_vocab

runner = CliRunner()
SUGGESTED = [Suggestion("4015065-3", 0.8312345678, "Epos"),
             Suggestion("4033447-8", 0.25, "Künstliche Intelligenz")]


def _pymarc(path: Path) -> list:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return parse_xml_to_array(io.BytesIO(data)) if data.lstrip().startswith(b"<") \
        else list(MARCReader(data))


def _subjects(rec) -> list[tuple[str, list[str], str, str, float, str, str]]:
    """(link, $0s, label, 883 $a, score, date, agency) of each 650 that an 883 links to."""
    notes = {fld["8"]: fld for fld in rec.get_fields("883")}
    return [(fld["8"], fld.get_subfields("0"), fld["a"], notes[fld["8"]]["a"],
             parse_score(notes[fld["8"]]["c"]), notes[fld["8"]]["d"], notes[fld["8"]]["q"])
            for fld in rec.get_fields("650") if fld.get("8") in notes]


@pytest.mark.parametrize("name", ["out.mrc", "out.xml", "out.mrc.gz"])
def test_suggestions_read_back_by_pymarc_with_ids_labels_scores(tmp_path, name):
    fmt = "marcxml" if ".xml" in name else "marc"
    stream = MarcPredictionStream(tmp_path / name, fmt, agency="DE-X", date="20260101").open()
    stream.write("(DE-101)123", SUGGESTED, domains=[("lit", 0.9), ("his", 0.41234)])
    stream.write("3A1666713376", SUGGESTED[1:])
    stream.write("empty", [])
    stream.commit()
    first, second, empty = _pymarc(tmp_path / name)
    # domains: 084 $2 linsearch, linked to an 883 with the score, after the subjects' links
    notes = {fld["8"]: fld for fld in first.get_fields("883")}
    assert [(f["8"], f["a"], f["2"], parse_score(notes[f["8"]]["c"]), notes[f["8"]]["a"])
            for f in first.get_fields("084")] == [
        ("3\\p", "lit", "linsearch", 0.9, "maschinell gebildet"),
        ("4\\p", "his", "linsearch", 0.41234, "maschinell gebildet")]
    assert not second.get_fields("084")
    assert (first["001"].data, first["003"].data) == ("123", "DE-101")
    assert second["001"].data == "3A1666713376" and second.get("003") is None
    assert _subjects(first) == [
        ("1\\p", ["(DE-588)4015065-3", "https://d-nb.info/gnd/4015065-3"], "Epos",
         "maschinell gebildet", 0.831235, "20260101", "DE-X"),
        ("2\\p", ["(DE-588)4033447-8", "https://d-nb.info/gnd/4033447-8"],
         "Künstliche Intelligenz", "maschinell gebildet", 0.25, "20260101", "DE-X")]
    assert first.get_fields("650")[0].indicators == (" ", "7")
    # fully machine-generated (MARC 21: 0); 1 would say a person had a hand in it
    assert first.get_fields("883")[0].indicators == ("0", " ")
    assert [s[2] for s in _subjects(second)] == ["Künstliche Intelligenz"]
    assert not empty.get_fields("650")
    # tagalign reads its own suggestions back as machine-made: never gold by default
    got = list(read_records(tmp_path / name))
    assert got[0].id == "(DE-101)123" and got[0].subjects == []
    assert got[0].machine_subjects == ["4015065-3", "4033447-8"]
    assert got[0].domains == []  # the machine's domains are not gold either


def test_merge_adds_fields_and_keeps_the_record_whole(tmp_path):
    src = tmp_path / "in.mrc"
    src.write_bytes(binary([dnb_record()]))
    stream = MarcPredictionStream(tmp_path / "out.xml", "marcxml", date="20260101",
                                  merge=src).open()
    stream.write("(DE-101)1234567890", SUGGESTED)
    stream.commit()
    (before,), (after,) = _pymarc(src), _pymarc(tmp_path / "out.xml")
    added = [fld for fld in after.fields if fld.get("8") in ("3\\p", "4\\p")]
    kept = [fld for fld in after.fields if fld not in added]
    assert [str(x) for x in kept] == [str(x) for x in before.fields]  # untouched, in order
    assert [fld.tag for fld in added] == ["650", "650", "883", "883"]
    tags = [fld.tag for fld in after.fields]
    assert tags == sorted(tags)  # each added field in its place by tag
    # links after the record's own (1\p, 2\p); the agency is the record's 003
    assert [(s[0], s[2], s[6]) for s in _subjects(after)][-2:] == [
        ("3\\p", "Epos", "DE-101"), ("4\\p", "Künstliche Intelligenz", "DE-101")]
    (rec,) = read_records(tmp_path / "out.xml")
    assert rec.machine_subjects == ["4011455-7", "4015065-3", "4033447-8"]


@pytest.fixture(scope="module")
def proj(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("marc")
    project = Project.create(root / "proj", tiny_vocab(), "lexical")
    project.train(tiny_records(10))
    return root / "proj"


def _marc_file(path: Path, recs: list[Record], fmt: str = "marc", bad_at: int | None = None
               ) -> Path:
    buf = io.BytesIO()
    writer = MarcWriter(buf, fmt)
    for i, rec in enumerate(recs):
        if i == bad_at:
            buf.write(b"00999" + b"x" * 40 + b"\x1d")  # a record with a bad leader length
        writer.write(record_to_marc(rec))
    writer.close()
    path.write_bytes(gzip.compress(buf.getvalue()) if path.suffix == ".gz" else buf.getvalue())
    return path


def _suggest(proj: Path, src: Path, out: Path, *extra: str):
    return runner.invoke(app, ["suggest", str(proj), "--input", str(src), "--output", str(out),
                               "--limit", "3", *extra])


@pytest.mark.parametrize("name", ["out.mrc", "out.xml"])
def test_suggest_marc_in_marc_out_merge_and_resume(proj, tmp_path, name):
    recs = tiny_records(12, seed=7)
    src = _marc_file(tmp_path / "in.mrc", recs, bad_at=5)
    out = tmp_path / name
    res = _suggest(proj, src, out, "--merge", "--agency", "DE-X")
    assert res.exit_code == 0, res.output
    assert "record 6 (byte" in res.output and "the leader gives a length of 999" in res.output
    assert "12 records read: 12 tagged" in res.output
    written = _pymarc(out)
    assert [r["001"].data for r in written] == [r.id for r in recs]
    for rec, marc in zip(recs, written, strict=True):
        assert marc["245"]["a"] == rec.title and marc["520"]["a"] == rec.abstract
        subjects = _subjects(marc)
        assert 1 <= len(subjects) <= 3 and {s[6] for s in subjects} == {"DE-X"}
        assert [s[4] for s in subjects] == sorted((s[4] for s in subjects), reverse=True)
    # the same run in JSONL names the same subjects, scores and labels
    assert _suggest(proj, src, tmp_path / "out.jsonl").exit_code == 0
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [[(s["id"], s["label"], s["score"]) for s in line["subjects"]] for line in lines] \
        == [[(s[1][0].removeprefix("(DE-588)"), s[2], s[4]) for s in _subjects(m)]
            for m in written]
    # interrupted after 4 records and a half: --resume keeps them, tags the rest, same file
    whole = out.read_bytes()
    ends = [m.end() for m in re.finditer(rb"\x1d|</record>\n", whole)]
    again = tmp_path / f"again{out.suffix}"
    partial_path(again).write_bytes(whole[:ends[3] + 30])
    res = _suggest(proj, src, again, "--merge", "--agency", "DE-X", "--resume")
    assert res.exit_code == 0, res.output
    assert "4 already done (--resume)" in res.output
    assert again.read_bytes() == whole


def test_suggest_jsonl_in_marcxml_out_by_name_and_usage_errors(proj, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r.to_json()) + "\n" for r in tiny_records(3)))
    res = _suggest(proj, src, tmp_path / "out.xml.gz")
    assert res.exit_code == 0, res.output
    assert [r["001"].data for r in _pymarc(tmp_path / "out.xml.gz")] == ["r0", "r1", "r2"]
    assert (tmp_path / "out.xml.gz").read_bytes()[:2] == b"\x1f\x8b"
    res = _suggest(proj, src, tmp_path / "x.jsonl", "--merge")
    assert res.exit_code == 1 and "--merge and --agency go with MARC output" in res.output
    res = _suggest(proj, src, tmp_path / "x.xml", "--merge")
    assert res.exit_code == 1 and "--merge needs MARC input" in res.output


def _gold_marc(path: Path) -> Path:
    """Two records: people's subjects in 650, one machine-made 650 (linked to an 883)."""
    recs = []
    for i, (people, machine) in enumerate([(["4015065-3", "4033447-8"], "4046076-9"),
                                           (["4025741-1"], "4045791-6")]):
        rec = record_to_marc(Record(id=f"g{i}", title=tiny_vocab().label(people[0], "de"),
                                    language="de", subjects=people,
                                    machine_subjects=[machine]))
        recs.append(rec)
    path.write_bytes(binary(recs))
    return path


def test_eval_scores_against_people_subjects_unless_asked(tmp_path):
    gold = _gold_marc(tmp_path / "gold.mrc")
    pred = tmp_path / "pred.jsonl"
    pred.write_text('{"id": "g0", "subjects": ["4015065-3", "4033447-8"]}\n'
                    '{"id": "g1", "subjects": ["4025741-1"]}\n')
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--ks", "5", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout[res.stdout.index("{"):])["overall"]["recall@5"] == 1.0
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--ks", "5", "--json",
                              "--subjects", "machine"])
    assert res.exit_code == 0, res.output
    recall = json.loads(res.stdout[res.stdout.index("{"):])["overall"]["recall@5"]
    assert recall == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_train_reads_marc_without_machine_subjects(tmp_path, trained_records):
    seen = trained_records
    gold = _gold_marc(tmp_path / "train.mrc")
    vocab = write_tiny_vocab(tmp_path / "vocab.tsv")
    args = ["train", str(tmp_path / "proj"), "--vocab", str(vocab), "--train", str(gold),
            "--recipe", "lexical", "--overwrite", "--no-feedback"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert [r.subjects for r in seen[-1]] == [["4015065-3", "4033447-8"], ["4025741-1"]]
    assert (tmp_path / "proj" / "model" / "recipe.json").exists()
    # machine-made subjects never train a tagger (issue 47): the old flag says so
    for extra in (["--include-machine-subjects"], ["--subjects", "machine"]):
        res = runner.invoke(app, [*args, *extra])
        assert res.exit_code == 1 and "never train a tagger" in res.output, res.output
    assert len(seen) == 1


def test_batch_takes_marc_shards(proj, tmp_path):
    from tagalign.batch import get_engine, plan_shards, run_batch

    recs = tiny_records(30, seed=9)
    folder = tmp_path / "in"
    folder.mkdir()
    _marc_file(folder / "a.mrc", recs[:12], bad_at=3)
    _marc_file(folder / "b.xml.gz", recs[12:], fmt="marcxml")
    (folder / "notes.txt.bak").write_text("not an input")
    assert [(Path(s.path).name, s.size) for s in plan_shards(folder, 10)] == [
        ("a.mrc", 10), ("a.mrc", 3), ("b.xml.gz", 10), ("b.xml.gz", 8)]
    res = run_batch({"task": "suggest", "project": str(proj), "batch_size": 8}, folder,
                    tmp_path / "out", get_engine("local"), shard_size=10)
    assert (res.records_in, res.records_out, res.errors) == (31, 30, 1)
    rows = {}
    for part in sorted((tmp_path / "out").glob("part-*.jsonl")):
        rows.update((obj["id"], obj) for obj in map(json.loads, part.read_text().splitlines()))
    assert list(rows) == [r.id for r in recs]
    (err,) = map(json.loads, (tmp_path / "out" / "errors-00000.jsonl").read_text().splitlines())
    assert err["stage"] == "read" and "record 4 (byte" in err["where"]


def test_records_with_an_input_report_name_the_file(tmp_path):
    src = _marc_file(tmp_path / "x.mrc.gz", tiny_records(3), bad_at=1)
    report = InputReport(stream=io.StringIO())
    assert [r.id for r in read_records(src, report=report)] == ["r0", "r1", "r2"]
    assert report.skipped[0].startswith(f"{src}: record 2 (byte ")
