"""The shared task's metrics on hand-computed examples, the report shape, and `tagalign eval`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.evaluate import evaluate, read_predictions
from tagalign.evaluate.metrics import group_metrics
from tagalign.records import Record, read_records


def rec(rid, subjects, lang="de", rtype="Book"):
    return Record(id=rid, title=rid, language=lang, type=rtype, subjects=subjects)


def test_hand_computed_values_with_duplicates_and_short_lists():
    gold = [{"a", "b"}, {"c"}]
    # record 1: ranking a, x, a(dup), b → deduped a, x, b; record 2: a 1-item list
    m = group_metrics(gold, [["a", "x", "a", "b"], ["c"]], ks=[2, 5])
    # k=2: r1 top2 = a,x → 1 hit: P=1/2 R=1/2; r2 top2 = c → 1 hit: P=1/2 (k not len) R=1
    assert m["precision@2"] == pytest.approx((0.5 + 0.5) / 2)
    assert m["recall@2"] == pytest.approx((0.5 + 1.0) / 2)
    # F1 of the averages: 2*0.5*0.75/(1.25) = 0.6
    assert m["f1@2"] == pytest.approx(0.6)
    # k=5: r1 = a,x,b → 2 hits: P=2/5 R=1; r2: P=1/5 R=1
    assert m["precision@5"] == pytest.approx(0.3)
    assert m["recall@5"] == pytest.approx(1.0)
    assert m["avg_recall"] == pytest.approx((0.75 + 1.0) / 2)
    assert m["avg_f1"] == pytest.approx((0.6 + 2 * 0.3 * 1 / 1.3) / 2)
    # R-precision@5: r1 cut=min(5,2)=2 → 1/2; r2 cut=1 → 1 ⇒ 0.75
    assert m["r-precision@5"] == pytest.approx(0.75)
    # nDCG@5 r1: hits at ranks 1 and 3 → (1 + 1/log2(4)) / (1 + 1/log2(3)); r2: 1
    import math
    ndcg1 = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert m["ndcg@5"] == pytest.approx((ndcg1 + 1) / 2)


def test_report_shape_breakdowns_missing_and_empty_gold():
    records = [rec("r1", ["a", "b"], "de", "Book"), rec("r2", ["c"], "en", "Thesis"),
               rec("r3", [], "en", "Thesis"), rec("r4", ["d"], "en", "Book")]
    preds = {"r1": ["a", "x"], "r2": ["y"], "r3": ["z"]}  # r4 missing, r3 has no gold
    report = evaluate(records, preds, ks=[1, 2])
    assert list(report) == ["ks", "overall", "by_language", "by_type", "by_type_language",
                            "missing_predictions", "no_gold"]
    assert report["missing_predictions"] == 1 and report["no_gold"] == 1
    o = report["overall"]
    assert o["n"] == 3
    # R@2: r1 1/2, r2 0, r4 0 → 1/6
    assert o["recall@2"] == pytest.approx(1 / 6)
    assert list(o)[:4] == ["n", "precision@1", "recall@1", "f1@1"]
    assert report["by_language"]["de"]["recall@1"] == pytest.approx(0.5)
    assert report["by_language"]["en"]["n"] == 2
    assert report["by_type_language"]["Book/en"]["n"] == 1
    assert set(report["by_type"]) == {"Book", "Thesis"}


def _plain_avg_recall_f1(records, preds, ks):
    """An independent, straightforward computation (sets and loops)."""
    ps, rs = {k: [] for k in ks}, {k: [] for k in ks}
    for r in records:
        if not r.subjects:
            continue
        seen, ranking = set(), []
        for s in preds.get(r.id, []):
            if s not in seen:
                seen.add(s)
                ranking.append(s)
        for k in ks:
            hit = len(set(r.subjects) & set(ranking[:k]))
            ps[k].append(hit / k)
            rs[k].append(hit / len(set(r.subjects)))
    out = {}
    for k in ks:
        p, r = sum(ps[k]) / len(ps[k]), sum(rs[k]) / len(rs[k])
        out[k] = (p, r, 2 * p * r / (p + r))
    return out


def test_dev_set_agrees_with_plain_computation(shared_data, tmp_path):
    dev = list(read_records(shared_data / "llms4subjects/dev.jsonl.gz"))
    # deterministic predictions: the previous record's gold, then own first gold, then noise
    preds = {}
    for prev, cur in zip([dev[-1], *dev[:-1]], dev, strict=True):
        preds[cur.id] = prev.subjects + cur.subjects[:1] + ["0000000-0"] * 3
    path = tmp_path / "pred.jsonl"
    path.write_text("".join(json.dumps({"id": k, "subjects": v}) + "\n"
                            for k, v in preds.items()))
    res = CliRunner().invoke(app, ["eval", str(shared_data / "llms4subjects/dev.jsonl.gz"),
                                   str(path), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    plain = _plain_avg_recall_f1(dev, preds, [5, 10, 15, 20])
    assert report["overall"]["n"] == 19949
    for k, (p, r, f1) in plain.items():
        assert round(report["overall"][f"precision@{k}"], 4) == round(p, 4)
        assert round(report["overall"][f"recall@{k}"], 4) == round(r, 4)
        assert round(report["overall"][f"f1@{k}"], 4) == round(f1, 4)
    assert round(report["overall"]["avg_recall"], 4) == round(
        sum(v[1] for v in plain.values()) / 4, 4)
    assert set(report["by_language"]) == {"de", "en"}
    assert report["missing_predictions"] == 0


def test_cli_eval_reports_bad_lines_and_writes_submission(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "r1", "title": "t", "lang": "de", "type": "Book",
                                "subjects": ["4015065-3"]}) + "\n")
    pred = tmp_path / "pred.jsonl"
    pred.write_text('{"id": "r1", "subjects": [{"id": "gnd:4015065-3", "score": 0.9}]}\n'
                    "not json\n")
    assert read_predictions(pred) == {"r1": ["4015065-3"]}
    sub = tmp_path / "sub"
    res = CliRunner().invoke(app, ["eval", str(gold), str(pred), "--ks", "1",
                                   "--submission-dir", str(sub)])
    assert res.exit_code == 0, res.output
    assert f"{pred}:2" in res.output
    body = json.loads((sub / "Book/de/r1.json").read_text())
    assert body == {"dcterms:subject": ["gnd:4015065-3"]}
    res = CliRunner().invoke(app, ["eval", str(gold), str(pred), "--strict"])
    assert res.exit_code == 1 and f"{pred}:2" in res.output
    res = CliRunner().invoke(app, ["eval", str(gold), str(pred), "--ks", "0"])
    assert res.exit_code == 1 and "--ks" in res.output
