"""The shared task's metrics, exactly (LLMs4Subjects, SemEval-2025 Task 5 / GermEval-2025).

For one record with gold set G and ranking L (deduplicated, best first):

* P@k = |G ∩ L[:k]| / k            (k, not len(L[:k]): a short list is penalised)
* R@k = |G ∩ L[:k]| / |G|
* R-precision@k = |G ∩ L[:min(k,|G|)]| / min(k, |G|)
* nDCG@k = Σ_{i<k, L[i]∈G} 1/log2(i+2)  /  Σ_{i<min(k,|G|)} 1/log2(i+2)

P and R are averaged over records; F1@k = 2·P̄·R̄ / (P̄ + R̄) of the averages;
avg_recall = mean of R̄@k over the ks, avg_f1 = mean of F1@k over the ks. Records with an
empty gold set are left out (as the task does) and counted as ``no_gold``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

DEFAULT_KS = (5, 10, 15, 20)


def dedupe(ranking: Iterable[str]) -> list[str]:
    """Keep the first occurrence of each id (a duplicate must not count twice)."""
    return list(dict.fromkeys(ranking))


def hits_matrix(gold: Sequence[set[str]], rankings: Sequence[list[str]], depth: int
                ) -> np.ndarray:
    """(n, depth) 0/1 matrix: is the i-th ranked id of record r a gold subject?"""
    hits = np.zeros((len(gold), depth), dtype=np.float64)
    for r, (g, ranking) in enumerate(zip(gold, rankings, strict=True)):
        for i, sid in enumerate(dedupe(ranking)[:depth]):
            if sid in g:
                hits[r, i] = 1.0
    return hits


def group_metrics(gold: Sequence[set[str]], rankings: Sequence[list[str]],
                  ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """All metrics for one group of records (records with empty gold must be removed)."""
    n = len(gold)
    out: dict[str, float] = {"n": n}
    if n == 0:
        return out
    depth = max(ks)
    hits = hits_matrix(gold, rankings, depth)
    cum = np.cumsum(hits, axis=1)
    size = np.array([len(g) for g in gold], dtype=np.float64)
    discount = 1.0 / np.log2(np.arange(depth) + 2.0)
    gains = np.cumsum(hits * discount, axis=1)
    ideal = np.cumsum(discount)
    f1s, recalls = [], []
    for k in ks:
        found = cum[:, k - 1]
        p = float(np.mean(found / k))
        r = float(np.mean(found / size))
        f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
        cut = np.minimum(size, k).astype(int)
        rprec = float(np.mean(cum[np.arange(n), cut - 1] / cut))
        ndcg = float(np.mean(gains[:, k - 1] / ideal[cut - 1]))
        out[f"precision@{k}"] = p
        out[f"recall@{k}"] = r
        out[f"f1@{k}"] = f1
        out[f"r-precision@{k}"] = rprec
        out[f"ndcg@{k}"] = ndcg
        f1s.append(f1)
        recalls.append(r)
    out["avg_recall"] = float(np.mean(recalls))
    out["avg_f1"] = float(np.mean(f1s))
    return out
