"""Recall by train-count bucket (`tagalign.evaluate.frequency`, `tagalign eval --by-frequency`)
on hand-made records whose every figure is counted by hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.evaluate.frequency import (
    bucket_of,
    frequency_report,
    subject_counts,
    subject_recall,
)
from tagalign.records import Record

KS = [1, 2, 5]


def rec(rid, subjects, lang="de"):
    return Record(id=rid, title=rid, language=lang, subjects=subjects)


#: C common (6 records), R rare (2 records, one listing it twice), U in none
TRAIN = [rec(f"t{i}", ["C"] + (["R", "R"] if i < 2 else []) + (["X"] if i == 5 else []))
         for i in range(6)]
#: d1 carries one unseen, one rare and one common subject; d2 (English) a rare and a common
#: one; d3 no gold (left out); d4 has no prediction
DEV = [rec("d1", ["U", "R", "C"]), rec("d2", ["C", "R"], "en"), rec("d3", []),
       rec("d4", ["C"], "en")]
#: d1: U at 1, C at 3 (after a repeat of U, which takes no slot); d2: R at 1, C at 6
PRED = {"d1": ["U", "zz", "U", "C", "a", "b", "R"], "d2": ["R", "a", "b", "c", "d", "C"],
        "d3": ["C"]}


def test_counts_are_records_carrying_a_subject():
    assert subject_counts(TRAIN) == {"C": 6, "R": 2, "X": 1}
    assert [bucket_of(n) for n in (0, 1, 4, 5, 60)] == ["unseen", "rare", "rare", "common",
                                                          "common"]
    assert bucket_of(2, common_min=2) == "common" and bucket_of(1, common_min=2) == "rare"
    with pytest.raises(ValueError, match="common_min must be at least 2"):
        bucket_of(0, common_min=1)


def test_buckets_exact_overall_and_by_language():
    report = frequency_report(DEV, PRED, subject_counts(TRAIN), KS)
    assert report["ks"] == KS and report["common_min"] == 5
    overall = report["overall"]
    assert list(overall) == ["unseen", "rare", "common"]
    # 6 gold pairs: U (d1), R (d1, d2), C (d1, d2, d4)
    assert overall["unseen"] == {"gold": 1, "records": 1, "share": pytest.approx(1 / 6),
                                 "recall@1": 1.0, "recall@2": 1.0, "recall@5": 1.0}
    # R: d2's at rank 1; d1's at rank 6 (after dedupe), beyond 5
    assert overall["rare"] == {"gold": 2, "records": 2, "share": pytest.approx(2 / 6),
                               "recall@1": 0.5, "recall@2": 0.5, "recall@5": 0.5}
    # C: d1's at rank 3, d2's at 6, d4 has no prediction
    assert overall["common"] == {"gold": 3, "records": 3, "share": pytest.approx(3 / 6),
                                 "recall@1": 0.0, "recall@2": 0.0,
                                 "recall@5": pytest.approx(1 / 3)}
    de, en = report["by_language"]["de"], report["by_language"]["en"]
    assert list(report["by_language"]) == ["de", "en"]
    assert de["rare"] == {"gold": 1, "records": 1, "share": pytest.approx(1 / 3),
                          "recall@1": 0.0, "recall@2": 0.0, "recall@5": 0.0}
    assert de["common"]["recall@5"] == 1.0
    # English has no unseen gold: its recall is undefined, not 0
    assert en["unseen"] == {"gold": 0, "records": 0, "share": 0.0, "recall@1": None,
                            "recall@2": None, "recall@5": None}
    assert en["rare"]["recall@1"] == 1.0 and en["rare"]["share"] == pytest.approx(1 / 3)
    assert en["common"] == {"gold": 2, "records": 2, "share": pytest.approx(2 / 3),
                            "recall@1": 0.0, "recall@2": 0.0, "recall@5": 0.0}


def test_threshold_and_counts_made_elsewhere():
    # counts of a caller's own (a plain dict); R at 2 is common from common_min 2
    report = frequency_report(DEV, PRED, {"C": 6, "R": 2}, KS, common_min=2)
    assert report["overall"]["rare"]["gold"] == 0
    assert report["overall"]["common"]["gold"] == 5
    assert report["overall"]["common"]["recall@1"] == pytest.approx(1 / 5)  # d2's R
    # every subject unseen: the unseen bucket is all the gold, and its recall the plain micro
    blind = frequency_report(DEV, PRED, {}, KS)["overall"]
    assert blind["unseen"]["gold"] == 6 and blind["unseen"]["share"] == 1.0
    assert blind["unseen"]["recall@5"] == pytest.approx(3 / 6)  # U, C of d1; R of d2


def test_subject_recall_of_exactly_those_subjects():
    out = subject_recall(DEV, PRED, {"R", "nowhere"}, KS)
    assert out["ks"] == KS
    assert out["overall"] == {"gold": 2, "records": 2, "share": pytest.approx(2 / 6),
                              "recall@1": 0.5, "recall@2": 0.5, "recall@5": 0.5}
    assert out["by_language"]["de"]["recall@5"] == 0.0
    assert out["by_language"]["en"]["recall@1"] == 1.0
    # the same figures as the rare bucket, which holds exactly R
    assert out["overall"] == frequency_report(DEV, PRED, subject_counts(TRAIN),
                                              KS)["overall"]["rare"]
    assert subject_recall(DEV, PRED, set(), KS)["overall"]["recall@1"] is None


def _write(path, records):
    path.write_text("".join(json.dumps({"id": r.id, "title": r.title, "lang": r.language,
                                        "subjects": r.subjects}) + "\n" for r in records))
    return path


def test_cli_by_frequency_json_table_and_errors(tmp_path):
    gold = _write(tmp_path / "dev.jsonl", DEV)
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(json.dumps({"id": rid, "subjects": ids}) + "\n"
                            for rid, ids in PRED.items()))
    # the training records in two files of two formats: JSONL and Annif's document TSV
    train = _write(tmp_path / "train.jsonl", TRAIN[:4])
    tsv = tmp_path / "more.tsv"
    tsv.write_text("".join(f"text {i}\t<https://d-nb.info/gnd/C>\n" for i in range(2)))
    runner = CliRunner()
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--ks", "1,2,5", "--json",
                              "--by-frequency", str(train), "--by-frequency", str(tsv)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["by_frequency"] == frequency_report(DEV, PRED, subject_counts(TRAIN), KS)
    assert report["overall"]["n"] == 3  # the task's report is unchanged beside it
    # the threshold: C (6 records) is rare below 7
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--json", "--common-min", "7",
                              "--by-frequency", str(train), "--by-frequency", str(tsv)])
    assert json.loads(res.stdout)["by_frequency"]["overall"]["rare"]["gold"] == 5
    # the text output: the table with its rows
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--by-frequency", str(train),
                              "--by-frequency", str(tsv)], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "by train frequency (unseen 0, rare 1–4, common ≥5" in res.stdout
    assert "│ all   │ unseen │    1 │       1 │ 16.7% │" in res.stdout
    assert "│ en    │ unseen │    0 │       0 │  0.0% │      – │" in res.stdout
    # without the option: no such part
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--json"])
    assert "by_frequency" not in json.loads(res.stdout)
    # errors: a missing file in one line, a bad threshold refused by the option
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--by-frequency",
                              str(tmp_path / "nope.jsonl")])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert f"training records not found: {tmp_path / 'nope.jsonl'}" in res.output
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--by-frequency", str(train),
                              "--common-min", "1"])
    assert res.exit_code == 2 and "--common-min" in res.output
    # a malformed training line: skipped and reported as the loaders do; --strict stops
    bad = tmp_path / "bad.jsonl"
    bad.write_text(train.read_text() + "not json\n")
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--json", "--by-frequency",
                              str(bad)])
    assert res.exit_code == 0 and f"{bad}:5" in res.stderr
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--strict", "--by-frequency",
                              str(bad)])
    assert res.exit_code == 1 and f"{bad}:5" in res.output
