"""The shared task's metrics on hand-computed examples, the report shape, I/O, `tagalign eval`."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.evaluate import SubjectEvaluator, evaluate, group_metrics
from tagalign.evaluate.metrics import metric_names
from tagalign.predictions import (
    read_predictions,
    read_submission,
    write_predictions,
    write_submission,
)
from tagalign.records import BadInputError, InputReport, Record, read_records
from tagalign.suggest import Suggestion

KS4 = [5, 10, 15, 20]
GROUP_KEYS_4 = (["n"] + [f"{m}@{k}" for k in KS4 for m in ("precision", "recall", "f1")]
                + [f"r-precision@{k}" for k in KS4] + [f"ndcg@{k}" for k in KS4]
                + ["avg_recall", "avg_f1"])
REPORT_KEYS = ["ks", "overall", "by_language", "by_type", "by_type_language",
               "missing_predictions"]


def rec(rid, subjects, lang="de", rtype="Book"):
    return Record(id=rid, title=rid, language=lang, type=rtype, subjects=subjects)


def test_hand_computed_values_with_duplicates_and_short_lists():
    gold = [{"a", "b"}, {"c"}]
    # r1: a, x, a(dup), b → deduped a, x, b (the repeat takes no slot); r2: a 1-item list
    m = group_metrics(gold, [["a", "x", "a", "b"], ["c"]], ks=[2, 5])
    # k=2: r1 top2 = a,x → 1 hit: P=1/2 R=1/2; r2 top2 = c → 1 hit: P=1/2 (÷k, not ÷len) R=1
    assert m["precision@2"] == pytest.approx((0.5 + 0.5) / 2)
    assert m["recall@2"] == pytest.approx((0.5 + 1.0) / 2)
    # F1 of the averages: 2·0.5·0.75 / 1.25 = 0.6
    assert m["f1@2"] == pytest.approx(0.6)
    # k=5 > both list lengths: r1 = a,x,b → 2 hits: P=2/5 R=1; r2: P=1/5 R=1
    assert m["precision@5"] == pytest.approx(0.3)
    assert m["recall@5"] == pytest.approx(1.0)
    # F1@5 = 2·0.3·1/1.3 = 0.461538…; avg over ks: R (0.75+1)/2, F1 (0.6+0.4615)/2
    assert m["f1@5"] == pytest.approx(0.6 / 1.3)
    assert m["avg_recall"] == pytest.approx(0.875)
    assert m["avg_f1"] == pytest.approx((0.6 + 0.6 / 1.3) / 2)
    # R-precision@5: r1 cut=min(5,2)=2 → top2 a,x → 1/2; r2 cut=1 → c → 1 ⇒ 0.75
    assert m["r-precision@5"] == pytest.approx(0.75)
    # R-precision@2 is the same cut here (|G| ≤ 2) ⇒ 0.75
    assert m["r-precision@2"] == pytest.approx(0.75)
    # nDCG@5 r1: hits at ranks 1 and 3 → (1 + 1/log2 4) / (1 + 1/log2 3) = 1.5/1.6309 = 0.9197;
    # r2: hit at rank 1, ideal 1 → 1
    ndcg1 = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert m["ndcg@5"] == pytest.approx((ndcg1 + 1) / 2)
    # nDCG@2 r1: hit at rank 1 only → 1 / 1.6309 = 0.6131; r2: 1
    assert m["ndcg@2"] == pytest.approx((1 / (1 + 1 / math.log2(3)) + 1) / 2)


def test_duplicates_do_not_take_slots_and_empty_gold_is_left_out():
    # ranking x, x, x, a: deduped x, a → at k=2 a is found (without dedupe it would not be)
    m = group_metrics([{"a"}, set()], [["x", "x", "x", "a"], ["a"]], ks=[2])
    # the empty-gold record is dropped: n=1, R@2 = 1/1, P@2 = 1/2
    assert m["n"] == 1
    assert m["recall@2"] == 1.0 and m["precision@2"] == 0.5
    # a group with no scorable record has every key, n=0 and zeros
    empty = group_metrics([set()], [["a"]], ks=[1])
    assert list(empty) == metric_names([1]) and empty["n"] == 0 and empty["avg_recall"] == 0.0


def test_report_shape_breakdowns_missing_and_empty_gold():
    records = [rec("r1", ["a", "b"], "de", "Book"), rec("r2", ["c"], "en", "Thesis"),
               rec("r3", [], "en", "Thesis"), rec("r4", ["d"], "en", "Book")]
    preds = {"r1": ["a", "x"], "r2": ["y", "c"], "r3": ["z"]}  # r4 missing, r3 has no gold
    evaluator = SubjectEvaluator(records, ks=[2, 1])
    report = evaluator(preds)
    assert list(report) == REPORT_KEYS
    assert report["ks"] == [1, 2]  # sorted
    assert report["missing_predictions"] == 1 and evaluator.no_gold == 1 and len(evaluator) == 3
    o = report["overall"]
    assert list(o) == ["n", "precision@1", "recall@1", "f1@1", "precision@2", "recall@2",
                       "f1@2", "r-precision@1", "r-precision@2", "ndcg@1", "ndcg@2",
                       "avg_recall", "avg_f1"]
    assert o["n"] == 3
    # R@1: r1 a → 1/2, r2 y → 0, r4 (empty) → 0 ⇒ 1/6;  R@2: r1 1/2, r2 c → 1, r4 0 ⇒ 1/2
    assert o["recall@1"] == pytest.approx(1 / 6)
    assert o["recall@2"] == pytest.approx(1 / 2)
    # P@2: (1/2 + 1/2 + 0)/3 = 1/3 ⇒ F1@2 = 2·(1/3)·(1/2)/(5/6) = 0.4
    assert o["f1@2"] == pytest.approx(0.4)
    assert o["avg_recall"] == pytest.approx((1 / 6 + 1 / 2) / 2)
    # by language: de = {r1}: R@1 = 1/2; en = {r2, r4} (r3 dropped): R@2 = (1 + 0)/2
    assert report["by_language"]["de"]["recall@1"] == pytest.approx(0.5)
    assert report["by_language"]["en"]["n"] == 2
    assert report["by_language"]["en"]["recall@2"] == pytest.approx(0.5)
    # by type: Book = {r1, r4}: R@2 = (1/2 + 0)/2; Thesis = {r2}: P@2 = 1/2
    assert list(report["by_type"]) == ["Book", "Thesis"]
    assert report["by_type"]["Book"]["recall@2"] == pytest.approx(0.25)
    assert report["by_type"]["Thesis"]["precision@2"] == pytest.approx(0.5)
    assert list(report["by_type_language"]) == ["Book/de", "Book/en", "Thesis/en"]
    assert report["by_type_language"]["Book/en"]["n"] == 1
    assert report["by_type_language"]["Book/en"]["recall@2"] == 0.0
    # predictions for ids the gold file lacks are counted (r3 is in the file, "zz" is not)
    assert evaluator.unknown_ids({**preds, "zz": ["a"]}) == 1
    # the evaluator is reusable; `evaluate` is the one-shot form
    assert evaluate(records, preds, ks=[2, 1]) == report


def test_read_predictions_formats_normalisation_and_bad_lines(tmp_path):
    path = tmp_path / "pred.jsonl.gz"
    lines = [
        {"id": "r1", "subjects": [{"id": "gnd:4015065-3", "label": "Epos", "score": 0.9},
                                  {"id": "https://d-nb.info/gnd/4123065-6", "score": 0.5}]},
        {"id": "r2", "subjects": ["http://d-nb.info/gnd/4033447-8", "4068097-6"]},
        "not json",
        {"id": "r3", "subjects": [{"label": "no id"}]},
        {"id": "r1", "subjects": ["4033447-8"]},
    ]
    with gzip.open(path, "wt") as fh:
        for obj in lines:
            fh.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    report = InputReport()
    preds = read_predictions(path, report)
    assert preds == {"r1": ["4015065-3", "4123065-6"], "r2": ["4033447-8", "4068097-6"]}
    assert [s.split(": ")[0] for s in report.skipped] == [f"{path}:3", f"{path}:4", f"{path}:5"]
    assert "predicted again" in report.skipped[2]
    with pytest.raises(BadInputError, match=f"{path}:3"):
        read_predictions(path, InputReport(strict=True))


def test_write_predictions_round_trip_gz_and_atomic(tmp_path):
    rows = [("r1", [Suggestion("4015065-3", 0.83, "Epos"), Suggestion("4123065-6", 0.5)]),
            ("r2", [])]
    for name in ("pred.jsonl", "pred.jsonl.gz"):
        path = tmp_path / name
        assert write_predictions(path, rows) == 2
        assert read_predictions(path) == {"r1": ["4015065-3", "4123065-6"], "r2": []}
    first = json.loads((tmp_path / "pred.jsonl").read_text().splitlines()[0])
    assert first == {"id": "r1", "subjects": [{"id": "4015065-3", "label": "Epos", "score": 0.83},
                                              {"id": "4123065-6", "label": "", "score": 0.5}]}

    def failing():
        yield "r9", [Suggestion("x", 1.0)]
        raise RuntimeError("suggester crashed")

    with pytest.raises(RuntimeError):
        write_predictions(tmp_path / "pred.jsonl", failing())
    # the old file is intact and no temporary file is left behind
    assert read_predictions(tmp_path / "pred.jsonl") == {"r1": ["4015065-3", "4123065-6"],
                                                         "r2": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.jsonl", "pred.jsonl.gz"]


def test_submission_layout_round_trip(tmp_path):
    records = [rec("3A1", ["a"], "de", "Book"), rec("3A2", ["b"], "en", "Thesis")]
    n = write_submission(tmp_path, records, {"3A1": ["4015065-3", "4015065-3", "4123065-6"]})
    assert n == 2
    # the task's format: gnd:-prefixed ids, best first, deduplicated; empty list if none
    assert json.loads((tmp_path / "Book/de/3A1.json").read_text()) == {
        "dcterms:subject": ["gnd:4015065-3", "gnd:4123065-6"]}
    assert json.loads((tmp_path / "Thesis/en/3A2.json").read_text()) == {"dcterms:subject": []}
    (tmp_path / "Book/de/bad.json").write_text("[1, 2]")
    report = InputReport()
    assert read_submission(tmp_path, report) == {"3A1": ["4015065-3", "4123065-6"], "3A2": []}
    assert len(report.skipped) == 1 and "bad.json" in report.skipped[0]


def _gold_file(tmp_path):
    gold = tmp_path / "gold.jsonl"
    rows = [{"id": "r1", "title": "t", "lang": "de", "type": "Book",
             "subjects": ["4015065-3", "4123065-6"]},
            {"id": "r2", "title": "t", "lang": "en", "type": "Thesis", "subjects": ["4033447-8"]},
            {"id": "r3", "title": "t", "lang": "en", "type": "Thesis", "subjects": []}]
    gold.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return gold


def test_cli_eval_json_shape_table_and_submission(tmp_path):
    gold = _gold_file(tmp_path)
    pred = tmp_path / "pred.jsonl"
    pred.write_text('{"id": "r1", "subjects": [{"id": "gnd:4015065-3", "score": 0.9}]}\n'
                    "not json\n")
    sub = tmp_path / "sub"
    res = CliRunner().invoke(app, ["eval", str(gold), str(pred), "--json",
                                   "--submission-dir", str(sub)])
    assert res.exit_code == 0, res.output
    assert f"{pred}:2" in res.stderr  # the bad line is reported with path:line
    assert "1 records without gold subjects were left out" in res.stderr
    report = json.loads(res.stdout)
    assert list(report) == REPORT_KEYS
    assert report["ks"] == KS4
    for group in [report["overall"], *report["by_language"].values(),
                  *report["by_type"].values(), *report["by_type_language"].values()]:
        assert list(group) == GROUP_KEYS_4
    assert list(report["by_language"]) == ["de", "en"]
    assert list(report["by_type_language"]) == ["Book/de", "Thesis/en"]
    # r1: 1 of 2 gold found → R@k = 1/2; r2 has no prediction → 0 ⇒ overall R@5 = 1/4
    assert report["overall"]["n"] == 2 and report["missing_predictions"] == 1
    assert report["overall"]["recall@5"] == pytest.approx(0.25)
    assert report["overall"]["precision@5"] == pytest.approx((1 / 5) / 2)
    # every gold record gets a submission file, r3 (no gold) too
    assert json.loads((sub / "Book/de/r1.json").read_text()) == {
        "dcterms:subject": ["gnd:4015065-3"]}
    assert sorted(p.name for p in sub.rglob("*.json")) == ["r1.json", "r2.json", "r3.json"]
    # the submission folder can itself be scored, giving the same numbers (r2's file is
    # there, an empty list, as the task's script requires: so nothing is "missing")
    res2 = CliRunner().invoke(app, ["eval", str(gold), str(sub), "--json"])
    assert json.loads(res2.stdout) == {**report, "missing_predictions": 0}
    # plain output: readable tables with the values
    res = CliRunner().invoke(app, ["eval", str(gold), str(pred), "--ks", "1,5"])
    assert res.exit_code == 0, res.output
    assert "by record type / language" in res.stdout and "Thesis/en" in res.stdout
    assert "0.2500" in res.stdout  # R@5 overall and R@1 of the whole set


def test_cli_eval_errors_are_one_line(tmp_path):
    gold = _gold_file(tmp_path)
    pred = tmp_path / "pred.jsonl"
    pred.write_text('{"id": "r1", "subjects": ["4015065-3"]}\nnot json\n')
    runner = CliRunner()
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--strict"])
    assert res.exit_code == 1 and f"{pred}:2" in res.output
    for bad in ("0", "a,b", "5,-1", ","):
        res = runner.invoke(app, ["eval", str(gold), str(pred), "--ks", bad])
        assert res.exit_code == 1 and "--ks" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["eval", str(tmp_path / "nope.jsonl"), str(pred)])
    assert res.exit_code == 1 and "gold records not found" in res.output
    res = runner.invoke(app, ["eval", str(gold), str(tmp_path / "nope.jsonl")])
    assert res.exit_code == 1 and "predictions not found" in res.output
    res = runner.invoke(app, ["eval", "--help"])
    assert res.exit_code == 0 and "Example: tagalign eval" in res.output


def _plain_scores(records, preds, ks):
    """An independent, straightforward computation of the overall numbers (sets, loops)."""
    sums = {name: 0.0 for k in ks for name in
            (f"p{k}", f"r{k}", f"rp{k}", f"nd{k}")}
    n = 0
    for r in records:
        gold = set(r.subjects)
        if not gold:
            continue
        n += 1
        ranking = []
        for s in preds.get(r.id, []):
            if s not in ranking:
                ranking.append(s)
        for k in ks:
            hit = len(gold & set(ranking[:k]))
            sums[f"p{k}"] += hit / k
            sums[f"r{k}"] += hit / len(gold)
            cut = min(k, len(gold))
            sums[f"rp{k}"] += len(gold & set(ranking[:cut])) / cut
            dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(ranking[:k]) if s in gold)
            sums[f"nd{k}"] += dcg / sum(1 / math.log2(i + 2) for i in range(cut))
    out = {"n": n}
    for k in ks:
        p, rc = sums[f"p{k}"] / n, sums[f"r{k}"] / n
        out |= {f"precision@{k}": p, f"recall@{k}": rc, f"f1@{k}": 2 * p * rc / (p + rc),
                f"r-precision@{k}": sums[f"rp{k}"] / n, f"ndcg@{k}": sums[f"nd{k}"] / n}
    out["avg_recall"] = sum(out[f"recall@{k}"] for k in ks) / len(ks)
    out["avg_f1"] = sum(out[f"f1@{k}"] for k in ks) / len(ks)
    return out


@pytest.mark.slow
def test_dev_set_agrees_with_plain_computation(shared_data, tmp_path):
    """`tagalign eval` on the real dev set (19,949 records) = the plain computation (~3 s)."""
    dev_path = shared_data / "llms4subjects/dev.jsonl.gz"
    dev = list(read_records(dev_path))
    # deterministic predictions: the previous record's gold, then the record's own first
    # gold subject twice (a duplicate), then a non-subject; every 50th record gets none
    preds = {}
    for i, (prev, cur) in enumerate(zip([dev[-1], *dev[:-1]], dev, strict=True)):
        if i % 50 != 7:
            preds[cur.id] = prev.subjects + cur.subjects[:1] * 2 + ["0000000-0"]
    path = tmp_path / "pred.jsonl"
    path.write_text("".join(json.dumps({"id": k, "subjects": v}) + "\n"
                            for k, v in preds.items()))
    res = CliRunner().invoke(app, ["eval", str(dev_path), str(path), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    plain = _plain_scores(dev, preds, KS4)
    assert report["overall"]["n"] == plain["n"] == 19949
    assert list(report["overall"]) == GROUP_KEYS_4 and set(plain) == set(GROUP_KEYS_4)
    for key, value in plain.items():
        assert round(report["overall"][key], 4) == round(value, 4), key
    assert report["missing_predictions"] == 19949 - len(preds) == 399
    de = _plain_scores([r for r in dev if r.language == "de"], preds, KS4)
    assert report["by_language"]["de"]["avg_recall"] == pytest.approx(de["avg_recall"])
    assert set(report["by_language"]) == {"de", "en"}
    assert sum(g["n"] for g in report["by_type_language"].values()) == 19949
