"""The shared task's metrics, exactly (LLMs4Subjects, SemEval-2025 Task 5 / GermEval-2025).

For one record with gold set G and ranking L (deduplicated, best first):

* P@k = |G ∩ L[:k]| / k            (k, not len(L[:k]): a short list is penalised)
* R@k = |G ∩ L[:k]| / |G|
* R-precision@k = |G ∩ L[:min(k,|G|)]| / min(k, |G|)
* nDCG@k = Σ_{i<k, L[i]∈G} 1/log2(i+2)  /  Σ_{i<min(k,|G|)} 1/log2(i+2)   (binary gains)

P and R are averaged over records; F1@k = 2·P̄·R̄ / (P̄ + R̄) of the averages (the task's
script does the same); avg_recall = mean of R̄@k over the ks (the headline), avg_f1 = mean
of F1@k over the ks.

Choices where the task leaves room, documented here once:

* Duplicates: a ranking is deduplicated keeping the first occurrence *before* cutting at
  k, so a repeated id neither counts twice nor takes a slot. (The official script takes
  ``set(L[:k])``: a repeat counts once but does use up a slot; rankings without repeats,
  which every tagalign writer produces, score identically.)
* Empty gold: R@k is undefined, so such records are left out of every average, as the
  task's script does (it skips records without ``dcterms:subject``); callers count them.
* The task's script rounds each record's P and R to 4 decimals before averaging; we do
  not, so results can differ from it in the 5th decimal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tagalign.errors import InputError

DEFAULT_KS = (5, 10, 15, 20)


def check_ks(ks: Iterable[int]) -> list[int]:
    """Sorted, distinct, positive cut-offs; ``ValueError`` otherwise."""
    out = sorted({int(k) for k in ks})
    if not out or out[0] < 1:
        raise InputError(f"ks must be positive integers, got {list(ks)}")
    return out


def dedupe(ranking: Iterable[str]) -> list[str]:
    """Keep the first occurrence of each id (a duplicate must not count twice)."""
    return list(dict.fromkeys(ranking))


def hits_matrix(gold: Sequence[set[str]], rankings: Sequence[Sequence[str]], depth: int
                ) -> np.ndarray:
    """(n, depth) 0/1 matrix: is the i-th (deduplicated) ranked id of record r gold?"""
    hits = np.zeros((len(gold), depth), dtype=np.float64)
    for r, (g, ranking) in enumerate(zip(gold, rankings, strict=True)):
        for i, sid in enumerate(dedupe(ranking)[:depth]):
            if sid in g:
                hits[r, i] = 1.0
    return hits


def metric_names(ks: Sequence[int]) -> list[str]:
    """Key order of one group: n, P/R/F1 per k, R-precision per k, nDCG per k, averages."""
    names = ["n"]
    for k in ks:
        names += [f"precision@{k}", f"recall@{k}", f"f1@{k}"]
    names += [f"r-precision@{k}" for k in ks]
    names += [f"ndcg@{k}" for k in ks]
    return [*names, "avg_recall", "avg_f1"]


def metrics_from_hits(hits: np.ndarray, sizes: np.ndarray, ks: Sequence[int]
                      ) -> dict[str, float]:
    """All metrics of one group from its hit matrix (depth ≥ max k) and gold-set sizes ≥ 1.

    An empty group gets n = 0 and 0.0 everywhere, so every group has the same keys.
    """
    ks = check_ks(ks)
    n = int(hits.shape[0])
    if n == 0:
        return {name: (0 if name == "n" else 0.0) for name in metric_names(ks)}
    depth = max(ks)
    cum = np.cumsum(hits[:, :depth], axis=1)
    discount = 1.0 / np.log2(np.arange(depth) + 2.0)
    gains = np.cumsum(hits[:, :depth] * discount, axis=1)
    ideal = np.cumsum(discount)
    rows = np.arange(n)
    values: dict[str, float] = {"n": n}
    f1s, recalls = [], []
    for k in ks:
        found = cum[:, k - 1]
        p = float(np.mean(found / k))
        r = float(np.mean(found / sizes))
        f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
        cut = np.minimum(sizes, k).astype(int)
        values[f"precision@{k}"] = p
        values[f"recall@{k}"] = r
        values[f"f1@{k}"] = f1
        values[f"r-precision@{k}"] = float(np.mean(cum[rows, cut - 1] / cut))
        values[f"ndcg@{k}"] = float(np.mean(gains[:, k - 1] / ideal[cut - 1]))
        f1s.append(f1)
        recalls.append(r)
    values["avg_recall"] = float(np.mean(recalls))
    values["avg_f1"] = float(np.mean(f1s))
    return {name: values[name] for name in metric_names(ks)}


def group_metrics(gold: Sequence[set[str]], rankings: Sequence[Sequence[str]],
                  ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """All metrics for one group of records; records with an empty gold set are left out."""
    ks = check_ks(ks)
    keep = [i for i, g in enumerate(gold) if g]
    gold = [set(gold[i]) for i in keep]
    hits = hits_matrix(gold, [rankings[i] for i in keep], max(ks))
    sizes = np.array([len(g) for g in gold], dtype=np.float64)
    return metrics_from_hits(hits, sizes, ks)
