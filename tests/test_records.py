"""Record loaders: JSONL, the official JSON-LD layout, Annif TSV; bad input reporting."""

from __future__ import annotations

import io
import json
import types

import pytest

from tagalign.records import BadInputError, InputReport, read_records


def test_jsonld_sample_loads_59_records_with_gold(shared_data):
    sample = shared_data / "llms4subjects/jsonld-sample"
    recs = list(read_records(sample))
    assert len(recs) == 59 and all(r.subjects for r in recs)
    kohl = next(r for r in recs if r.id == "3A011417145")
    assert kohl.title == "Untersuchungen zur Jahresdynamik einer Kohlmeisenpopulation"
    assert (kohl.type, kohl.language) == ("Thesis", "de")
    assert kohl.subjects == ["4046803-3", "4164600-9"]
    assert kohl.domains == ["bio"]
    assert kohl.abstract.startswith("Aus der Einleitung")
    assert {r.language for r in recs} == {"de", "en"}


def test_jsonl_real_file_streams(shared_data):
    it = read_records(shared_data / "llms4subjects/dev.jsonl.gz")
    assert isinstance(it, types.GeneratorType)
    first = next(it)
    assert first.id and first.title and first.subjects and first.language in ("de", "en")


def _write(tmp_path, lines):
    path = tmp_path / "recs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps({"id": "a", "title": "T", "abstract": "x", "lang": "de", "type": "Book",
                   "subjects": ["gnd:4015065-3", "9999999-9"]})


def test_corrupted_line_is_reported_with_line_number_and_skipped(tmp_path):
    path = _write(tmp_path, [GOOD, '{"id": "b", "title": "broken', GOOD.replace('"a"', '"c"')])
    err = io.StringIO()
    report = InputReport(stream=err)
    recs = list(read_records(path, report=report))
    assert [r.id for r in recs] == ["a", "c"]
    assert f"{path}:2" in err.getvalue()
    assert len(report.skipped) == 1 and "1 malformed items skipped" in report.summary()
    with pytest.raises(BadInputError, match=f"{path}:2"):
        list(read_records(path, report=InputReport(strict=True)))


def test_gold_ids_missing_from_vocabulary_are_counted(tmp_path, gnd_vocab):
    path = _write(tmp_path, [GOOD, GOOD.replace('"a"', '"b"')])
    report = InputReport(stream=io.StringIO())
    recs = list(read_records(path, vocab=gnd_vocab, report=report))
    assert all(r.subjects == ["4015065-3"] for r in recs)
    assert "2 gold subject ids (1 distinct) not in the vocabulary" in report.summary()


def test_missing_fields_are_reported(tmp_path):
    path = _write(tmp_path, ['{"title": "no id"}', '[1, 2]', GOOD])
    report = InputReport(stream=io.StringIO())
    assert [r.id for r in read_records(path, report=report)] == ["a"]
    assert "missing 'id'" in report.skipped[0] and ":2:" in report.skipped[1]


def test_jsonld_bad_file_is_reported(tmp_path, shared_data):
    d = tmp_path / "dev/Book/en"
    d.mkdir(parents=True)
    (d / "x1.jsonld").write_text("{not json")
    err = io.StringIO()
    assert list(read_records(tmp_path, report=InputReport(stream=err))) == []
    assert "x1.jsonld" in err.getvalue()


def test_annif_tsv_corpus(tmp_path):
    path = tmp_path / "docs.tsv"
    path.write_text("Epen des Mittelalters\t<http://d-nb.info/gnd/4015065-3>\n\tx\n")
    report = InputReport(stream=io.StringIO())
    recs = list(read_records(path, report=report))
    assert recs[0].title == "Epen des Mittelalters" and recs[0].subjects == ["4015065-3"]
    assert f"{path}:2" in report.skipped[0]
