"""Annif's metrics (`tagalign.evaluate.selection`) and the optimize grid, by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import ndcg_score
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.evaluate.optimize import grid_search
from tagalign.evaluate.selection import ScoredHits, selection_metrics, subject_results

# record 1: gold {a, b, c}; ranked a .9 (hit), x .6, b .4 (hit), y .2
# record 2: gold {d};       ranked z .8, d .7 (hit)
GOLD = [{"a", "b", "c"}, {"d"}]
RANKED = [[("a", 0.9), ("x", 0.6), ("b", 0.4), ("y", 0.2)], [("z", 0.8), ("d", 0.7)]]


def test_selection_metrics_by_hand():
    sh = ScoredHits.build(GOLD, RANKED)
    # limit 3, threshold 0.5: record 1 keeps a, x (b is 0.4) → TP 1 of |S| 2, |G| 3;
    # record 2 keeps z, d → TP 1 of 2, |G| 1
    m = selection_metrics(sh, 3, 0.5)
    assert m["Precision_doc_avg"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert m["Recall_doc_avg"] == pytest.approx((1 / 3 + 1) / 2)
    assert m["F1_doc_avg"] == pytest.approx((2 * 1 / (2 + 3) + 2 * 1 / (2 + 1)) / 2)
    assert m["Precision_micro"] == pytest.approx(2 / 4)
    assert m["Recall_micro"] == pytest.approx(2 / 4)
    assert m["F1_micro"] == pytest.approx(0.5)
    assert (m["True_positives"], m["False_positives"], m["False_negatives"]) == (2, 2, 2)
    assert m["Documents_evaluated"] == 2
    # Precision@1: a is gold, z is not; Precision@3 over at most 3 *selected* (2 each)
    assert m["Precision@1"] == pytest.approx(0.5)
    assert m["Precision@3"] == pytest.approx(0.5)
    # NDCG: record 1 gain 1 (a at 1), ideal 1 + 1/log2 3 + 1/2; record 2 gain 1/log2 3, ideal 1
    ideal1 = 1 + 1 / np.log2(3) + 0.5
    assert m["NDCG"] == pytest.approx((1 / ideal1 + 1 / np.log2(3)) / 2)
    # NDCG@5 cuts the ideal list at min(|G|, 5): the same here
    assert m["NDCG@5"] == pytest.approx(m["NDCG"])
    # F1@5: the selection's first 5 = the selection
    assert m["F1@5"] == pytest.approx(m["F1_doc_avg"])
    # nothing selected: precision 0 (not NaN), recall 0
    none = selection_metrics(sh, 3, 0.95)
    assert none["Precision_doc_avg"] == 0.0 and none["Recall_doc_avg"] == 0.0
    assert none["False_negatives"] == 4 and none["NDCG"] == 0.0


def test_per_record_limits_and_unscored_rankings():
    sh = ScoredHits.build(GOLD, RANKED)
    # record 1 limit 1 (a), record 2 limit 2 (z, d): TP 2 of 3 selected
    m = selection_metrics(sh, np.array([1, 2]), np.array([0.0, 0.0]))
    assert m["Precision_micro"] == pytest.approx(2 / 3)
    # a plain list of ids passes every threshold
    plain = ScoredHits.build(GOLD, [[(sid, None) for sid, _ in row] for row in RANKED])
    assert selection_metrics(plain, 2, 0.99)["True_positives"] == 2


def test_ndcg_at_k_agrees_with_sklearn():
    rng = np.random.default_rng(0)
    subjects = [f"s{i}" for i in range(30)]
    gold, ranked, y_true, y_score = [], [], [], []
    for _ in range(40):
        g = set(rng.choice(subjects, rng.integers(1, 8), replace=False).tolist())
        order = rng.permutation(30)[:12]
        scores = np.sort(rng.random(12))[::-1]
        gold.append(g)
        ranked.append([(subjects[j], float(s)) for j, s in zip(order, scores, strict=True)])
        y_true.append([1.0 if s in g else 0.0 for s in subjects])
        row = np.zeros(30)
        row[order] = scores
        y_score.append(row)
    sh = ScoredHits.build(gold, ranked)
    m = selection_metrics(sh, 12, 0.0)
    # at k ≤ 12 every record has k scored subjects, so no zero-score ties reach the cut
    for k in (5, 10):
        assert m[f"NDCG@{k}"] == pytest.approx(ndcg_score(y_true, y_score, k=k))


def test_grid_matches_selection_metrics_and_pareto():
    sh = ScoredHits.build(GOLD, RANKED)
    grid = grid_search(sh, limits=range(1, 5), thresholds=(0.0, 0.5, 0.75))
    for t, thr in enumerate(grid.thresholds):
        for li, lim in enumerate(grid.limits):
            m = selection_metrics(sh, lim, thr)
            assert grid.precision[t, li] == pytest.approx(m["Precision_doc_avg"])
            assert grid.recall[t, li] == pytest.approx(m["Recall_doc_avg"])
            assert grid.f1[t, li] == pytest.approx(m["F1_doc_avg"])
    # best F1 at limit 3, threshold 0: record 1 {a, x, b}: 2·2/(3+3), record 2 {z, d}: 2/3
    best = grid.best("f1")
    assert (best.limit, best.threshold) == (3, 0.0)
    assert best.f1 == pytest.approx(2 / 3)
    # best precision: limit 3, threshold 0: record 1 {a, x, b} 2/3, record 2 {z, d} 1/2
    # (a threshold of 0.5 or 0.75 drops a gold subject of record 1 before a wrong one)
    best_p = grid.best("precision")
    assert (best_p.limit, best_p.threshold) == (3, 0.0)
    assert best_p.precision == pytest.approx((2 / 3 + 1 / 2) / 2)
    front = grid.pareto()
    assert [p.recall for p in front] == sorted(p.recall for p in front)
    assert [p.precision for p in front] == sorted((p.precision for p in front), reverse=True)
    # nothing on the front is beaten in both by any grid point
    for p in front:
        assert not np.any((grid.precision > p.precision) & (grid.recall > p.recall))
    assert front[-1].recall == pytest.approx(grid.recall.max())


def test_subject_results_by_hand():
    sh = ScoredHits.build(GOLD, RANKED)
    rows = {r["subject"]: r for r in subject_results(sh, 3, 0.5)}
    assert rows["a"] | {} == {"subject": "a", "support": 1, "true_positives": 1,
                              "false_positives": 0, "false_negatives": 0, "precision": 1.0,
                              "recall": 1.0, "f1": 1.0}
    assert (rows["b"]["true_positives"], rows["b"]["false_negatives"]) == (0, 1)
    assert (rows["x"]["support"], rows["x"]["false_positives"], rows["x"]["f1"]) == (0, 1, 0.0)
    assert "y" not in rows  # never selected, never gold


def test_cli_eval_metrics_and_results_files(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text(
        '{"id": "r1", "title": "t", "language": "de", "subjects": ["a", "b", "c"]}\n'
        '{"id": "r2", "title": "u", "language": "en", "subjects": ["d"]}\n')
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(json.dumps({"id": f"r{i + 1}", "subjects": [
        {"id": sid, "score": s} for sid, s in row]}) + "\n" for i, row in enumerate(RANKED)))
    metrics, results = tmp_path / "m.json", tmp_path / "r.tsv"
    res = CliRunner().invoke(app, ["eval", str(gold), str(pred), "--json", "--limit", "3",
                                   "--threshold", "0.5", "--metrics-file", str(metrics),
                                   "--results-file", str(results)])
    assert res.exit_code == 0, res.output
    saved = json.loads(metrics.read_text())
    assert saved["Precision_micro"] == pytest.approx(0.5)
    assert saved["Recall_doc_avg"] == pytest.approx((1 / 3 + 1) / 2)
    # the task's figures beside them, unchanged: R@5 = (2/3 + 1)/2
    assert saved["task"]["recall@5"] == pytest.approx((2 / 3 + 1) / 2)
    assert json.loads(res.stdout)["overall"] == saved["task"]
    lines = results.read_text().splitlines()
    assert lines[0].split("\t")[:3] == ["subject", "label", "support"]
    assert "a\t\t1\t1\t0\t0\t1.0000\t1.0000\t1.0000" in lines
