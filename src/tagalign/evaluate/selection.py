"""Annif's metrics: how good is the *selection* a limit and a threshold make of a ranking?

The shared task scores rankings cut at k (`tagalign.evaluate.metrics`); a library that
indexes with a tool keeps only the top ``limit`` subjects scoring at least ``threshold``
(Annif's ``eval``/``optimize``). For one record with gold set G and selection S (the first
``limit`` ranked subjects with score ≥ threshold):

* doc-averaged: P = |G∩S| / |S| (0 when S is empty), R = |G∩S| / |G|,
  F1 = 2|G∩S| / (|S| + |G|); each averaged over records (sklearn's ``average="samples"``)
* micro-averaged: Σ|G∩S| / Σ|S|, Σ|G∩S| / Σ|G|, and their harmonic mean
* Precision@k, F1@k: the doc-averaged P and F1 of the selection's first k subjects
  (divided by how many there are, ≤ k, as Annif does — not by k as the task's P@k)
* NDCG: Σ_{i<|S|, S[i]∈G} 1/log2(i+2) / Σ_{i<|G|} 1/log2(i+2); NDCG@k cuts both sums at k
  (binary gains; a record's ideal list is its gold set)
* true/false positives/negatives: Σ|G∩S|, Σ|S∖G|, Σ|G∖S|

Records without gold subjects are left out, as everywhere in `tagalign.evaluate`. A
ranking without scores (a plain list of ids) passes every threshold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tagalign.evaluate.metrics import dedupe

#: Annif's names, in the order its ``eval`` prints them
SELECTION_METRICS = (
    "Precision_doc_avg", "Recall_doc_avg", "F1_doc_avg",
    "Precision_micro", "Recall_micro", "F1_micro",
    "F1@5", "NDCG", "NDCG@5", "NDCG@10", "Precision@1", "Precision@3", "Precision@5",
    "True_positives", "False_positives", "False_negatives", "Documents_evaluated",
)


@dataclass
class ScoredHits:
    """Rankings of records as arrays: ``hits[r, i]`` is the i-th ranked subject of record r
    gold, ``scores[r, i]`` its score (−inf past the ranking's end, +inf when unscored);
    ``sizes[r]`` = |G| ≥ 1; ``ids`` the ranked subject ids (for per-subject results)."""

    hits: np.ndarray
    scores: np.ndarray
    sizes: np.ndarray
    ids: list[list[str]]
    gold: list[set[str]]

    @classmethod
    def build(cls, gold: Sequence[set[str]],
              rankings: Sequence[Sequence[tuple[str, float | None]]], depth: int | None = None
              ) -> ScoredHits:
        """From gold sets and rankings of ``(subject id, score or None)``, best first;
        records with an empty gold set are dropped; ``depth`` caps the ranking length."""
        keep = [i for i, g in enumerate(gold) if g]
        ranked = [_dedupe_scored(rankings[i])[:depth] for i in keep]
        width = max((len(r) for r in ranked), default=0) if depth is None else depth
        hits = np.zeros((len(keep), width), bool)
        scores = np.full((len(keep), width), -np.inf)
        for r, (i, row) in enumerate(zip(keep, ranked, strict=True)):
            for j, (sid, score) in enumerate(row):
                hits[r, j] = sid in gold[i]
                scores[r, j] = np.inf if score is None else score
        golds = [set(gold[i]) for i in keep]
        return cls(hits, scores, np.array([len(g) for g in golds], np.float64),
                   [[sid for sid, _ in row] for row in ranked], golds)

    def __len__(self) -> int:
        return len(self.sizes)

    def subset(self, rows: np.ndarray) -> ScoredHits:
        return ScoredHits(self.hits[rows], self.scores[rows], self.sizes[rows],
                          [self.ids[i] for i in rows], [self.gold[i] for i in rows])

    def selected(self, limit: int | np.ndarray, threshold: float | np.ndarray
                 ) -> np.ndarray:
        """(n, depth) bool: the subjects a limit and threshold keep (one for all records,
        or arrays of one per record: per-language defaults)."""
        limit = np.broadcast_to(np.asarray(limit), (len(self),))[:, None]
        threshold = np.broadcast_to(np.asarray(threshold, np.float64), (len(self),))[:, None]
        return (self.scores >= threshold) & (np.arange(self.scores.shape[1]) < limit)


def _dedupe_scored(row: Sequence[tuple[str, float | None]]) -> list[tuple[str, float | None]]:
    first = dict.fromkeys(dedupe(sid for sid, _ in row))
    out = []
    for sid, score in row:
        if sid in first:
            out.append((sid, score))
            del first[sid]
    return out


def _discount(depth: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(depth) + 2.0)


def selection_metrics(sh: ScoredHits, limit: int | np.ndarray, threshold: float | np.ndarray
                      ) -> dict[str, float]:
    """Annif's metrics (`SELECTION_METRICS`) of the selection ``limit``/``threshold``."""
    n = len(sh)
    if n == 0:
        return {name: 0.0 for name in SELECTION_METRICS} | {"Documents_evaluated": 0}
    sel = sh.selected(limit, threshold)
    return _metrics_of(sh.hits & sel, sel, sh.sizes)


def _metrics_of(hit_sel: np.ndarray, sel: np.ndarray, sizes: np.ndarray) -> dict[str, float]:
    tp = hit_sel.sum(1).astype(np.float64)
    npred = sel.sum(1).astype(np.float64)
    order = np.cumsum(sel, axis=1)  # 1-based position of each selected subject within S
    out: dict[str, float] = {}
    p_doc = np.divide(tp, npred, out=np.zeros_like(tp), where=npred > 0)
    out["Precision_doc_avg"] = float(p_doc.mean())
    out["Recall_doc_avg"] = float((tp / sizes).mean())
    out["F1_doc_avg"] = float((2 * tp / (npred + sizes)).mean())
    tp_sum, np_sum, gold_sum = tp.sum(), npred.sum(), sizes.sum()
    p_micro = tp_sum / np_sum if np_sum else 0.0
    r_micro = tp_sum / gold_sum
    out["Precision_micro"] = float(p_micro)
    out["Recall_micro"] = float(r_micro)
    out["F1_micro"] = float(2 * p_micro * r_micro / (p_micro + r_micro)) \
        if p_micro + r_micro > 0 else 0.0
    first5 = sel & (order <= 5)
    tp5, n5 = (hit_sel & first5).sum(1), first5.sum(1)
    out["F1@5"] = float((2 * tp5 / (n5 + sizes)).mean())
    gain = np.where(hit_sel, 1.0 / np.log2(np.maximum(order, 1) + 1.0), 0.0)  # 1-based
    for name, k in (("NDCG", None), ("NDCG@5", 5), ("NDCG@10", 10)):
        g = gain if k is None else np.where(order <= k, gain, 0.0)
        ideal_len = sizes.astype(int) if k is None else np.minimum(sizes, k).astype(int)
        ideal = np.concatenate([[0.0], np.cumsum(_discount(int(ideal_len.max())))])
        out[name] = float((g.sum(1) / ideal[ideal_len]).mean())
    for k in (1, 3, 5):
        first = sel & (order <= k)
        tpk, nk = (hit_sel & first).sum(1), first.sum(1)
        out[f"Precision@{k}"] = float(np.divide(tpk, nk, out=np.zeros(len(tpk)),
                                                where=nk > 0).mean())
    out["True_positives"] = int(tp_sum)
    out["False_positives"] = int(np_sum - tp_sum)
    out["False_negatives"] = int(gold_sum - tp_sum)
    out["Documents_evaluated"] = int(len(sizes))
    return {name: out[name] for name in SELECTION_METRICS}


def subject_results(sh: ScoredHits, limit: int | np.ndarray, threshold: float | np.ndarray
                    ) -> list[dict[str, float | int | str]]:
    """Per subject (Annif's ``--results-file``): support |gold|, TP, FP, FN, P, R, F1 of the
    selection; subjects sorted by support, then id."""
    sel = sh.selected(limit, threshold)
    support: Counter[str] = Counter(s for g in sh.gold for s in g)
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    for i, ids in enumerate(sh.ids):
        for j, sid in enumerate(ids):
            if sel[i, j]:
                (tp if sh.hits[i, j] else fp)[sid] += 1
    rows: list[dict[str, float | int | str]] = []
    for sid in sorted(set(support) | set(fp), key=lambda s: (-support[s], s)):
        t, f, g = tp[sid], fp[sid], support[sid]
        p = t / (t + f) if t + f else 0.0
        r = t / g if g else 0.0
        rows.append({"subject": sid, "support": g, "true_positives": t,
                     "false_positives": f, "false_negatives": g - t, "precision": p,
                     "recall": r, "f1": 2 * t / (t + f + g) if t + f + g else 0.0})
    return rows
