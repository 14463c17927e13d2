"""Decision thresholds tuned on dev for micro-F1, always at least one label per record."""

from __future__ import annotations

import numpy as np

from tagalign.classify.metrics import micro_f1

GRID = np.round(np.arange(0.02, 0.96, 0.02), 2)


def decide(probs: np.ndarray, thresholds: np.ndarray | float) -> np.ndarray:
    """(n, C) scores → 0/1; a record with nothing above its thresholds gets its top label."""
    pred = probs >= np.asarray(thresholds, np.float32)
    if len(probs):
        empty = ~pred.any(1)
        pred[np.flatnonzero(empty), probs[empty].argmax(1)] = True
    return pred


def choose_decision(probs: np.ndarray, gold: np.ndarray, folds: np.ndarray
                    ) -> tuple[str, dict[str, float]]:
    """``per_class`` or ``global`` thresholds, whichever scores the better micro-F1 when
    tuned on all folds but one and scored on that one (averaged over the folds): a choice
    made on the tuning records alone. Per-class thresholds fit 29 numbers to the tuning
    records; over scores a stacker already calibrated per class they can overfit."""
    found: dict[str, list[float]] = {"per_class": [], "global": []}
    for f in np.unique(folds):
        held = folds == f
        t = tune(probs[~held], gold[~held])
        for kind in found:
            found[kind].append(micro_f1(gold[held], decide(probs[held],
                                                            np.asarray(t[kind], np.float32))))
    means = {kind: float(np.mean(v)) for kind, v in found.items()}
    return ("global" if means["global"] > means["per_class"] else "per_class"), means


def tune(probs: np.ndarray, gold: np.ndarray, grid: np.ndarray = GRID, rounds: int = 2
         ) -> dict:
    """A global threshold by grid search, then per-class thresholds by coordinate ascent
    from it (``rounds`` passes over the classes), each step keeping the best micro-F1 of
    the whole decision (the at-least-one rule couples the classes). Returns
    ``{"global", "per_class", "dev_micro_f1_global", "dev_micro_f1_per_class"}``."""
    best_t, best = 0.5, -1.0
    for t in grid:
        f = micro_f1(gold, decide(probs, float(t)))
        if f > best + 1e-12:
            best_t, best = float(t), f
    per = np.full(probs.shape[1], best_t, np.float32)
    per_best = best
    for _ in range(rounds):
        for c in range(probs.shape[1]):
            keep = per[c]
            for t in grid:
                per[c] = t
                f = micro_f1(gold, decide(probs, per))
                if f > per_best + 1e-12:
                    per_best, keep = f, float(t)
            per[c] = keep
    return {"global": best_t, "per_class": [round(float(x), 4) for x in per],
            "dev_micro_f1_global": best, "dev_micro_f1_per_class": per_best}
