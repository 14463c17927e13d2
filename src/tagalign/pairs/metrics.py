"""Metrics of ordinal graded word-in-context (CoMeDi subtask 1), named as the task does.

Krippendorff's alpha at the ordinal level between gold median labels and predictions (the
shared task's headline, per language and their unweighted mean), Spearman's rho between
gold labels and raw scores (checkpoint choice), and a 4 × 4 confusion matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np

from tagalign.errors import MissingExtraError
from tagalign.pairs.data import LABELS

#: scores, labels or gold values: a list or a NumPy array
Floats: TypeAlias = Sequence[float] | np.ndarray
#: languages or lemmas, one per pair: a list or a NumPy array
Strings: TypeAlias = Sequence[str] | np.ndarray


def krippendorff_alpha(gold: Floats, pred: Floats) -> float:
    """Ordinal alpha over two "coders" (gold, prediction); NaN when undefined (e.g. one
    value only). The `krippendorff` package computes it; the value domain is the union of
    the observed values, as the task's scorer leaves it."""
    try:  # an extra: `tagalign pairs` only
        import krippendorff
    except ImportError as exc:
        raise MissingExtraError("Krippendorff's alpha (tagalign pairs)", "krippendorff",
                                "pairs") from exc

    gold_a, pred_a = np.asarray(gold, float), np.asarray(pred, float)
    if len(gold_a) == 0 or len(np.unique(np.concatenate([gold_a, pred_a]))) < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=np.vstack([gold_a, pred_a]),
                                    level_of_measurement="ordinal"))


def spearman(gold: Floats, scores: Floats) -> float:
    from scipy.stats import spearmanr

    if len(gold) < 2 or np.ptp(np.asarray(gold, float)) == 0 or np.ptp(scores) == 0:
        return float("nan")
    return float(spearmanr(gold, scores).statistic)


def confusion(gold: Floats, pred: Floats) -> list[list[int]]:
    """Rows: gold label 1..4 (rounded half up), columns: predicted 1..4."""
    from sklearn.metrics import confusion_matrix

    g = np.floor(np.asarray(gold, float) + 0.5).astype(int)
    return confusion_matrix(g, np.asarray(pred, int), labels=list(LABELS)).tolist()


def evaluate(gold: Floats, pred: Floats, languages: Strings,
             scores: Floats | None = None) -> dict:
    """Per-language alpha, Spearman (of ``scores`` when given, else of the labels) and
    confusion, plus ``mean_alpha`` (unweighted over languages) and pooled figures."""
    gold_a, pred_a = np.asarray(gold, float), np.asarray(pred, float)
    score_a = np.asarray(scores if scores is not None else pred, float)
    langs = np.asarray(languages)
    per: dict[str, dict] = {}
    for lang in sorted(set(languages)):
        m = langs == lang
        per[lang] = {"pairs": int(m.sum()),
                     "alpha": krippendorff_alpha(gold_a[m], pred_a[m]),
                     "spearman": spearman(gold_a[m], score_a[m]),
                     "confusion": confusion(gold_a[m], pred_a[m])}
    alphas = [v["alpha"] for v in per.values()]
    return {"languages": per,
            "mean_alpha": float(np.nanmean(alphas)) if alphas and not all(
                np.isnan(alphas)) else float("nan"),
            "pooled_alpha": krippendorff_alpha(gold_a, pred_a),
            "spearman": spearman(gold_a, score_a), "pairs": int(len(gold_a))}
