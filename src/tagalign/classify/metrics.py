"""Multi-label metrics: micro-F1 (the headline of GermEval-2025 Subtask 1), macro-F1,
per-class precision/recall/F1, and the same by language. Kept in one place, named as the
field names them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _prf(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> tuple[np.ndarray, ...]:
    tp, fp, fn = (np.asarray(a, np.float64) for a in (tp, fp, fn))
    p = np.divide(tp, tp + fp, out=np.zeros_like(tp), where=(tp + fp) > 0)
    r = np.divide(tp, tp + fn, out=np.zeros_like(tp), where=(tp + fn) > 0)
    f = np.divide(2 * p * r, p + r, out=np.zeros_like(tp), where=(p + r) > 0)
    return p, r, f


def micro_f1(gold: np.ndarray, pred: np.ndarray) -> float:
    """Micro-averaged F1 of two (n, C) 0/1 matrices."""
    g, p = gold > 0, pred > 0
    tp = np.sum(g & p)
    denom = 2 * tp + np.sum(~g & p) + np.sum(g & ~p)
    return float(2 * tp / denom) if denom else 0.0


def scores(gold: np.ndarray, pred: np.ndarray, labels: Sequence[str]) -> dict:
    """micro P/R/F1, macro-F1 (over the classes present in gold or predictions) and
    per-class P/R/F1/support."""
    g, p = gold > 0, pred > 0
    tp, fp, fn = (g & p).sum(0), (~g & p).sum(0), (g & ~p).sum(0)
    mp, mr, mf = (float(x[0]) for x in _prf(np.array([tp.sum()]), np.array([fp.sum()]),
                                                    np.array([fn.sum()])))
    cp, cr, cf = _prf(tp, fp, fn)
    present = (g.sum(0) + p.sum(0)) > 0
    return {
        "n": int(len(g)),
        "micro_f1": mf, "micro_precision": mp, "micro_recall": mr,
        "macro_f1": float(cf[present].mean()) if present.any() else 0.0,
        "per_class": {lab: {"precision": float(cp[j]), "recall": float(cr[j]),
                            "f1": float(cf[j]), "support": int(g[:, j].sum())}
                      for j, lab in enumerate(labels) if present[j]},
    }


def report(gold: np.ndarray, pred: np.ndarray, labels: Sequence[str],
           languages: Sequence[str | None] | None = None) -> dict:
    """`scores` overall plus ``by_language`` (micro/macro-F1 and n per language)."""
    out = scores(gold, pred, labels)
    out["by_language"] = {}
    if languages is not None:
        langs = np.array([lg or "?" for lg in languages])
        for lang in sorted(set(langs)):
            m = langs == lang
            s = scores(gold[m], pred[m], labels)
            out["by_language"][lang] = {"n": s["n"], "micro_f1": s["micro_f1"],
                                        "macro_f1": s["macro_f1"]}
    return out
