"""How good are per-record quality estimates? (`tagalign eval --quality`,
benchmarks/quality/quality.py)

For each gold record with subjects G, a ranking L (its whole returned list) and an estimate
q of its recall:

* true recall = |G ∩ L| / |G|; Spearman and Pearson correlation of q with it;
* calibration: records in deciles of q (ties kept apart by id order), each decile's mean
  estimate against its mean true recall;
* release curve: release the top share of records by q (10 %, 20 %, …, 100 %): the cut-off
  estimate and the released records' P@5, R@5 and F1@5 as the task defines them
  (`tagalign.evaluate.metrics`: F1 of the averaged P and R).

Records without an estimate (empty text, a recipe without an estimator) are left out and
counted, as are records without gold subjects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.errors import InputError, MissingExtraError
from tagalign.evaluate.metrics import dedupe, hits_matrix, metrics_from_hits
from tagalign.io import atomic_path
from tagalign.records import Record

SHARES = tuple(round(0.1 * i, 1) for i in range(1, 11))
RELEASE_K = 5


def true_recall(gold: set[str], ranking: Sequence[str]) -> float:
    return len(gold & set(dedupe(ranking))) / len(gold)


def quality_report(records: Sequence[Record], rankings: Mapping[str, Sequence[str]],
                   estimates: Mapping[str, float | None], bins: int = 10,
                   shares: Sequence[float] = SHARES, k: int = RELEASE_K) -> dict:
    """``{"n", "no_estimate", "spearman", "pearson", "calibration", "release"}`` (see the
    module docstring). ``estimates``: estimated recall per record id (None: no estimate)."""
    scored = [r for r in records if r.subjects]
    have = [r for r in scored if estimates.get(r.id) is not None]
    if not have:
        raise InputError("no record with gold subjects has a quality estimate")
    est = np.array([estimates[r.id] for r in have], np.float64)  # none is None (have)
    gold = [set(r.subjects) for r in have]
    ranks = [list(rankings.get(r.id, ())) for r in have]
    truth = np.array([true_recall(g, rk) for g, rk in zip(gold, ranks, strict=True)])
    order = np.argsort(-est, kind="stable")  # best estimate first; ties in input order
    hits = hits_matrix(gold, ranks, k)
    sizes = np.array([len(g) for g in gold], np.float64)
    from scipy import stats  # here: 0.55 s to import, a third of every CLI command's start

    report: dict[str, Any] = {"n": len(have), "no_estimate": len(scored) - len(have),
              "spearman": _corr(stats.spearmanr, est, truth),
              "pearson": _corr(stats.pearsonr, est, truth),
              "calibration": [], "release": []}
    for part in np.array_split(order[::-1], min(bins, len(have))):  # lowest decile first
        report["calibration"].append({
            "n": len(part), "min": float(est[part].min()), "max": float(est[part].max()),
            "mean_estimate": float(est[part].mean()), "mean_recall": float(truth[part].mean())})
    for share in shares:
        top = order[:max(1, round(share * len(have)))]
        m = metrics_from_hits(hits[top], sizes[top], [k])
        report["release"].append({
            "share": float(share), "n": len(top), "cutoff": float(est[top].min()),
            f"precision@{k}": m[f"precision@{k}"], f"recall@{k}": m[f"recall@{k}"],
            f"f1@{k}": m[f"f1@{k}"], "mean_recall": float(truth[top].mean())})
    return report


def _corr(fn, a: np.ndarray, b: np.ndarray) -> float | None:
    """A correlation, or None where it is undefined (fewer than 2 records, a constant)."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(fn(a, b)[0])


def plot_quality(report: dict, path: Path | str, title: str = "quality estimate") -> None:
    """Calibration (left) and release curve (right) as a PNG (matplotlib, Agg backend)."""
    try:  # an extra, imported here only (as in `optimize.plot_pareto`)
        import matplotlib
    except ImportError as exc:
        raise MissingExtraError("tagalign eval --plot", "matplotlib", "plot") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    cal = report["calibration"]
    left.plot([c["mean_estimate"] for c in cal], [c["mean_recall"] for c in cal], "o-",
              label="deciles")
    left.plot([0, 1], [0, 1], ":", color="grey", label="perfect")
    left.set(xlabel="mean estimated recall", ylabel="mean true recall",
             title=f"calibration (Spearman {_fmt(report['spearman'])})")
    left.legend()
    rel = report["release"]
    key = next(k for k in rel[0] if k.startswith("f1@"))
    for metric in (key, key.replace("f1", "precision"), key.replace("f1", "recall")):
        right.plot([r["share"] for r in rel], [r[metric] for r in rel], "o-", label=metric)
    right.set(xlabel="share of records released (best estimates first)",
              title="release curve")
    right.legend()
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def format_quality(report: dict) -> str:
    """The report as plain-text tables (correlations, calibration, release curve)."""
    lines = [f"quality estimate: {report['n']} records "
             f"({report['no_estimate']} without an estimate left out)",
             f"Spearman {_fmt(report['spearman'])}  Pearson {_fmt(report['pearson'])} "
             "(estimated vs true recall per record)", "",
             "calibration (deciles of the estimate)",
             f"{'n':>6}  {'estimate range':<15}{'mean estimate':>14}{'true recall':>13}"]
    for c in report["calibration"]:
        lines.append(f"{c['n']:>6}  {c['min']:.3f}–{c['max']:.3f}    "
                     f"{c['mean_estimate']:>14.3f}{c['mean_recall']:>13.3f}")
    rel = report["release"]
    k = next(key for key in rel[0] if key.startswith("f1@"))[3:]
    lines += ["", "release curve (records released best estimate first)",
              f"{'released':>9}{'n':>7}{'cut-off':>9}{'P@' + k:>8}{'R@' + k:>8}{'F1@' + k:>8}"]
    for r in rel:
        lines.append(f"{r['share']:>9.0%}{r['n']:>7}{r['cutoff']:>9.3f}"
                     f"{r['precision@' + k]:>8.4f}{r['recall@' + k]:>8.4f}{r['f1@' + k]:>8.4f}")
    return "\n".join(lines)
