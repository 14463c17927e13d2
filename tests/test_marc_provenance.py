"""How a MARC record's subjects got there (issue 47): the 883 linked to each, read by the
DNB's process codes and MARC 21's first indicator as intellectual, confirmed or machine;
the 883s tagalign writes read back as what they say; training takes intellectual subjects,
confirmed ones only when asked, machine-made ones never; ``records stats`` shows it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from pymarc import MARCReader
from typer.testing import CliRunner

from marc_fixtures import binary, f, plain_record, write
from tagalign.cli import app
from tagalign.project import Project
from tagalign.records import InputReport, Record, read_records
from tagalign.records.loaders import record_from_json
from tagalign.records.marc.fields import record_from_marc
from tagalign.records.marc.provenance import (
    PROCESS,
    Provenance,
    is_known_process,
    provenance_field,
    read_provenance,
)
from tagalign.records.marc.writer import MarcWriter, record_to_marc
from tiny_models import tiny_records, tiny_vocab, write_tiny_vocab

runner = CliRunner()
MACH, CONF, INTEL = Provenance.MACHINE, Provenance.CONFIRMED, Provenance.INTELLECTUAL


@pytest.mark.parametrize(("process", "want"), [
    # DNB's automatic subject indexing, in every spelling its page lists
    ("maschinell gebildet", MACH), ("aepgnd", MACH), ("aep-gnd", MACH), ("aepgnd-pa", MACH),
    ("aep-gnd-pa", MACH), ("AEPGND", MACH), ("aeplcsh", MACH), ("aep-lcsh-pa", MACH),
    # derived by a machine: from the DDC through a concordance, taken over, mapped
    ("gndddc", MACH), ("gnd-ddc", MACH), ("gnd-ddc-pa", MACH),
    ("maschinell aus Konkordanz gebildet", MACH),
    ("cgrwk", MACH), ("cgrwk-pa", MACH), ("thesoz-gnd", MACH), ("stwgnd-pa", MACH),
    # DNB's intellectual indexing, a parallel edition's too
    ("dnb", INTEL), ("dnb-pa", INTEL), (" DNB ", INTEL),
    # a reviewed suggestion, as tagalign writes it
    ("maschinell gebildet, intellektuell bestätigt", CONF),
])
def test_process_families_decide_whatever_the_indicator(process, want):
    assert is_known_process(process)
    for ind1 in ("0", "1", "2", " "):
        assert read_provenance(ind1, process) is want, ind1


@pytest.mark.parametrize(("ind1", "want"), [
    ("0", MACH), ("1", MACH), ("2", INTEL), (" ", MACH), ("", MACH), ("x", MACH)])
def test_unknown_or_no_process_decided_by_indicator(ind1, want):
    # MARC 21: 0 fully, 1 partially machine-generated, 2 not; blank (no information): machine
    for process in ("frobnicate", None, "", "Übernahme aus paralleler Ausgabe"):
        assert read_provenance(ind1, process) is want, process
    assert not is_known_process("frobnicate") and not is_known_process(None)


@pytest.mark.parametrize(("kind", "ind1", "process"), [
    (MACH, "0", "maschinell gebildet"), (CONF, "1", "maschinell gebildet, intellektuell bestätigt"),
    (INTEL, "2", "dnb")])
def test_written_883_reads_back_as_its_kind(kind, ind1, process):
    fld = provenance_field(kind, 4, date="20260115", agency="DE-101",
                           score=0.8312 if kind is MACH else None)
    assert PROCESS[kind] == process
    assert (fld.tag, fld.indicators.first, fld.indicators.second) == ("883", ind1, " ")
    want = [("8", "4\\p"), ("a", process)] + ([("c", "0,831200")] if kind is MACH else [])
    assert [(s.code, s.value) for s in fld.subfields] == [*want, ("d", "20260115"),
                                                          ("q", "DE-101")]
    assert read_provenance(fld.indicators.first, fld["a"]) is kind


def _subject(sid: str, link: int | None = None):
    link_sub = ["8", f"{link}\\p"] if link is not None else []
    return f("650", " 7", *link_sub, "0", f"(DE-588){sid}", "2", "gnd")


def _note(link: int, ind1: str, process: str | None):
    return f("883", ind1 + " ", "8", f"{link}\\p", *(["a", process] if process else []),
             "d", "20240101", "q", "DE-101")


# every kind of 883 a DNB record holds, tagalign's confirmed one and an unknown process
MARKED = [  # (GND id, ind1, process, kind), all in the tiny vocabulary
    ("4015065-3", "1", "maschinell gebildet", MACH),
    ("4033447-8", "0", "aepgnd-pa", MACH),
    ("4025741-1", "1", "maschinell aus Konkordanz gebildet", MACH),
    ("4045791-6", "2", "dnb", INTEL),
    ("4046076-9", "1", "maschinell gebildet, intellektuell bestätigt", CONF),
    ("4011455-7", " ", "frobnicate", MACH),  # unknown, blank: the default
    ("4068097-6", "2", "frobnicate", INTEL),  # unknown, not machine-generated
]


def _provenance_record(cn: str = "1", people: tuple[str, ...] = ("4123065-6",)):
    rec = plain_record(cn, "Pilze am Fachwerk")
    rec.add_field(*(_subject(sid) for sid in people))
    for link, (sid, *_) in enumerate(MARKED, 1):
        rec.add_field(_subject(sid, link))
    for link, (_, ind1, process, _) in enumerate(MARKED, 1):
        rec.add_field(_note(link, ind1, process))
    return rec


def test_record_keeps_subjects_apart_by_their_883():
    rec = record_from_marc(_provenance_record())
    assert rec.subjects == ["4123065-6", "4045791-6", "4068097-6"]
    assert rec.confirmed_subjects == ["4046076-9"]
    assert rec.machine_subjects == ["4015065-3", "4033447-8", "4025741-1", "4011455-7"]
    assert rec.processes["4033447-8"] == ("0", "aepgnd-pa")
    assert "4123065-6" not in rec.processes  # no 883: a person's, nothing to count


def test_most_trusted_kind_wins_for_an_id_in_several_fields():
    rec = plain_record("1", "T")
    rec.add_field(_subject("4015065-3", 1), _subject("4015065-3", 2),  # machine, confirmed
                  _subject("4033447-8", 3), _subject("4033447-8"),  # machine, a person's
                  _note(1, "0", "aepgnd"), _note(2, "1", PROCESS[CONF]), _note(3, "0", "aepgnd"))
    got = record_from_marc(rec)
    assert (got.subjects, got.confirmed_subjects, got.machine_subjects) == (
        ["4033447-8"], ["4015065-3"], [])


def test_record_to_marc_and_json_keep_confirmed_subjects(tmp_path):
    rec = Record(id="(DE-101)7", title="T", language="de", subjects=["4123065-6"],
                 confirmed_subjects=["4046076-9"], machine_subjects=["4015065-3"])
    buf = io.BytesIO()
    MarcWriter(buf, "marc").write(record_to_marc(rec, date="20260115", agency="DE-101"))
    (back,) = read_records(write(tmp_path / "r.mrc", buf.getvalue()))
    assert back == rec
    (pm,) = MARCReader(buf.getvalue())
    assert sorted((n.indicators.first, n["a"]) for n in pm.get_fields("883")) == [
        ("0", "maschinell gebildet"), ("1", PROCESS[CONF])]
    assert record_from_json(rec.to_json()) == rec
    old = {"id": "x", "title": "T", "subjects": ["4123065-6"],
           "machine_subjects": ["4015065-3"]}  # JSONL saved before: loads as it did
    assert record_from_json(old).confirmed_subjects == []


def test_gold_takes_confirmed_and_machine_only_when_asked(tmp_path):
    path = write(tmp_path / "r.mrc", binary([_provenance_record()]))
    people = ["4123065-6", "4045791-6", "4068097-6"]
    got = {gold: next(read_records(path, gold=gold)).subjects
           for gold in ("intellectual", "confirmed", "machine")}
    assert next(read_records(path)).processes is None  # kept only when asked
    assert got == {"intellectual": people, "confirmed": [*people, "4046076-9"],
                   "machine": [*people, "4046076-9", "4015065-3", "4033447-8", "4025741-1",
                               "4011455-7"]}


@pytest.fixture(scope="module")
def proj(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("provenance")
    project = Project.create(root / "proj", tiny_vocab(), "lexical")
    project.train(tiny_records(10))
    return root / "proj"


def test_suggestions_written_as_marc_are_never_gold(proj, tmp_path):
    # a title that names one subject while a person gave another: one suggestion not gold
    recs = [*tiny_records(5, seed=3), Record(id="x", title=tiny_vocab().label("4025741-1", "de"),
                                              language="de", subjects=["4015065-3"])]
    buf = io.BytesIO()
    writer = MarcWriter(buf, "marc")
    for rec in recs:
        writer.write(record_to_marc(rec))
    src = write(tmp_path / "in.mrc", buf.getvalue())
    back = {}
    for extra in ([], ["--merge"]):
        out = tmp_path / f"out{len(extra)}.mrc"
        res = runner.invoke(app, ["suggest", str(proj), "--input", str(src), "--output",
                                  str(out), "--limit", "5", *extra])
        assert res.exit_code == 0, res.output
        back[bool(extra)] = list(read_records(out, gold="confirmed", processes=True,
                                              report=InputReport(stream=io.StringIO())))
    for rec, alone, merged in zip(recs, back[False], back[True], strict=True):
        # the suggestions alone: machine-made, no gold even with confirmed ones asked for
        assert alone.machine_subjects and (alone.subjects, alone.confirmed_subjects) == ([], [])
        assert set(alone.processes.values()) == {("0", "maschinell gebildet")}
        # merged into the input: its own subjects stay gold, the other suggestions are not
        assert (merged.subjects, merged.confirmed_subjects) == (rec.subjects, [])
        assert merged.machine_subjects == [s for s in alone.machine_subjects
                                           if s not in rec.subjects]
    assert any(r.machine_subjects for r in back[True])


def test_train_takes_intellectual_and_confirmed_only_with_the_flag(tmp_path,
                                                                    trained_records):
    seen = trained_records
    recs = [_provenance_record("1", ("4123065-6",)), _provenance_record("2", ())]
    train = write(tmp_path / "train.mrc", binary(recs))
    vocab = write_tiny_vocab(tmp_path / "v.tsv")
    args = ["train", str(tmp_path / "proj"), "--vocab", str(vocab),
            "--train", str(train), "--recipe", "lexical", "--overwrite", "--no-feedback"]
    people = ["4045791-6", "4068097-6"]
    for extra, want in (([], people), (["--subjects", "confirmed"], [*people, "4046076-9"])):
        res = runner.invoke(app, [*args, *extra])
        assert res.exit_code == 0, res.output
        assert [sorted(r.subjects) for r in seen[-1]] == [
            sorted(["4123065-6", *want]), sorted(want)]
    for extra in (["--subjects", "machine"], ["--subjects", "all"]):
        res = runner.invoke(app, [*args, *extra])
        assert res.exit_code == 1 and res.output.startswith("error: --subjects"), res.output
    assert len(seen) == 2


def test_records_stats_shows_what_the_reader_decided(tmp_path):
    path = write(tmp_path / "r.mrc", binary([_provenance_record(), _provenance_record("2")]))
    res = runner.invoke(app, ["records", "stats", str(path)])
    assert res.exit_code == 0, res.output
    rows: dict[str, str] = {}
    key = ""
    for line in res.stdout.splitlines():  # a long value wraps onto rows without a key
        if line.count("│") == 3:
            name, value = (cell.strip() for cell in line.split("│")[1:3])
            key = name or key
            rows[key] = f"{rows[key]} {value}" if not name else value
    assert rows["subjects by provenance"] == "intellectual 6, confirmed 2, machine 8"
    by_process = rows["by process (883 $a)"]
    assert by_process.count("→") == 8
    for part in ("(no 883) → intellectual 2", "maschinell gebildet → machine 2",
                 "aepgnd-pa → machine 2", "maschinell aus Konkordanz gebildet → machine 2",
                 "dnb → intellectual 2", f"{PROCESS[CONF]} → confirmed 2",
                 "frobnicate → machine 2", "frobnicate → intellectual 2"):
        assert part in by_process, part
    unknown = rows["unknown processes (by ind1)"]
    assert sorted(unknown.split(", ")) == ["frobnicate (ind1 2) → intellectual 2",
                                           "frobnicate (ind1 blank) → machine 2"]
