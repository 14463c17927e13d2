"""Annif's ``optimize``: the best limit and threshold, from one ranking per record.

Annif suggests once per threshold; here the rankings (depth ≥ the largest limit) are
computed once and every grid point is scored on the arrays of `ScoredHits`: for a
threshold t, the running counts of selected and of correct subjects along the ranking give
every limit's doc-averaged P = TP/|S|, R = TP/|G| and F1 = 2·TP/(|S|+|G|) at once.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tagalign.errors import MissingExtraError
from tagalign.evaluate.selection import ScoredHits
from tagalign.io import write_bytes_atomic

#: Annif's grid: limits 1–15, thresholds 0.00–0.95 by 0.05
LIMITS = tuple(range(1, 16))
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(20))
#: what ``--metric`` may name → the doc-averaged figure it maximises
METRICS = {"f1": "f1", "precision": "precision", "recall": "recall"}


@dataclass(frozen=True)
class GridPoint:
    limit: int
    threshold: float
    precision: float
    recall: float
    f1: float

    def to_json(self) -> dict[str, float]:
        return asdict(self)


@dataclass
class GridResult:
    """Doc-averaged P, R, F1 for every (threshold, limit) of the grid: arrays (T, L)."""

    limits: tuple[int, ...]
    thresholds: tuple[float, ...]
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    n: int

    def point(self, t: int, li: int) -> GridPoint:
        return GridPoint(self.limits[li], self.thresholds[t], float(self.precision[t, li]),
                         float(self.recall[t, li]), float(self.f1[t, li]))

    def best(self, metric: str = "f1") -> GridPoint:
        """The grid point maximising ``metric``; ties go to the lower threshold, then the
        smaller limit (the first in the grid's order)."""
        values = getattr(self, METRICS[metric])
        t, li = np.unravel_index(int(np.argmax(values)), values.shape)
        return self.point(int(t), int(li))

    def pareto(self) -> list[GridPoint]:
        """Points no other point beats in both precision and recall, by rising recall."""
        pts = [self.point(t, li) for t in range(len(self.thresholds))
               for li in range(len(self.limits))]
        pts.sort(key=lambda p: (-p.recall, -p.precision))
        front: list[GridPoint] = []
        for p in pts:
            if not front or p.precision > front[-1].precision:
                front.append(p)
        return front[::-1]


def grid_search(sh: ScoredHits, limits: Sequence[int] = LIMITS,
                thresholds: Sequence[float] = THRESHOLDS) -> GridResult:
    """Score every (threshold, limit) pair; the rankings must reach the largest limit."""
    limits, thresholds = tuple(limits), tuple(thresholds)
    if sh.hits.shape[1] < max(limits):
        # a shorter ranking would silently score large limits like smaller ones
        pad = max(limits) - sh.hits.shape[1]
        sh = ScoredHits(np.pad(sh.hits, ((0, 0), (0, pad))),
                        np.pad(sh.scores, ((0, 0), (0, pad)), constant_values=-np.inf),
                        sh.sizes, sh.ids, sh.gold)
    cols = np.array(limits) - 1
    shape = (len(thresholds), len(limits))
    P, R, F = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    sizes = sh.sizes[:, None]
    for t, threshold in enumerate(thresholds):
        sel = sh.scores >= threshold
        n_sel = np.cumsum(sel, axis=1)[:, cols]
        tp = np.cumsum(sel & sh.hits, axis=1)[:, cols]
        P[t] = np.divide(tp, n_sel, out=np.zeros(tp.shape), where=n_sel > 0).mean(0)
        R[t] = (tp / sizes).mean(0)
        F[t] = (2 * tp / (n_sel + sizes)).mean(0)
    return GridResult(limits, thresholds, P, R, F, len(sh))


def plot_pareto(result: GridResult, path: Path, title: str = "") -> None:
    """A small PNG: every grid point's precision against recall, the Pareto front joined
    and the best-F1 point marked (matplotlib's Agg backend: no display needed)."""
    try:  # an extra, imported here only: it costs a second every other command saves
        import matplotlib
    except ImportError as exc:
        raise MissingExtraError("tagalign optimize --plot", "matplotlib", "plot") from exc

    matplotlib.use("Agg")  # before pyplot: a server has no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3.5), dpi=100)
    ax.scatter(result.recall.ravel(), result.precision.ravel(), s=4, c="0.7",
               label="grid points")
    front = result.pareto()
    ax.plot([p.recall for p in front], [p.precision for p in front], "-o", ms=3,
            label="Pareto front")
    best = result.best("f1")
    ax.plot([best.recall], [best.precision], "r*", ms=10,
            label=f"best F1 {best.f1:.3f} (limit {best.limit}, thr {best.threshold:.2f})")
    ax.set_xlabel("recall (doc avg)")
    ax.set_ylabel("precision (doc avg)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
