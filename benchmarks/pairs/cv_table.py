"""Tables of `ordinal_wic_cv.py`: cut-point modes and settings by lemma-grouped
cross-validation, from the cached out-of-fold cosines (no model is loaded here)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: the modes compared (name, mode, shrink, fitted on dev-sized lemma sets); the last
#: two fit on every other-fold lemma: cut points taken from the CV's own out-of-fold
#: cosines instead of a dev set of a few words
MODES = [("per-language", "language", 0.0, True), ("pooled", "pooled", 0.0, True),
         ("shrunk κ=4", "shrunk", 4.0, True), ("shrunk κ=8", "shrunk", 8.0, True),
         ("shrunk κ=16", "shrunk", 16.0, True), ("normalised", "normalised", 0.0, True),
         ("per-language (all CV lemmas)", "language", 0.0, False),
         ("normalised (all CV lemmas)", "normalised", 0.0, False)]


def read_setting(folder: Path, pairs: list, folds, per_language: int):
    """The cached out-of-fold cosines of one setting, or None when a fold is missing."""
    from tagalign.pairs.crossval import OutOfFold, eval_index, pair_key

    index = eval_index(pairs, folds, per_language)
    cos, train_s, score_s, params = [], [], [], {}
    for k, ix in enumerate(index):
        path = folder / f"fold-{k}.json"
        if not path.exists():
            return None
        saved = json.loads(path.read_text("utf-8"))
        if saved["keys"] != [pair_key(pairs[i]) for i in ix]:
            raise SystemExit(f"{path}: another sample (folds, seed or --eval-per-language)")
        cos.append(np.asarray(saved["cosine"], float))
        train_s.append(float(saved["train_s"]))
        score_s.append(float(saved.get("score_s", 0.0)))
        params = saved["params"]
    idx = np.concatenate(index)
    oof = OutOfFold(keys=[pair_key(pairs[i]) for i in idx],
                    fold=np.concatenate([np.full(len(ix), k) for k, ix in enumerate(index)]),
                    language=np.array([pairs[i].language for i in idx]),
                    lemma=np.array([pairs[i].lemma for i in idx]),
                    gold=np.array([pairs[i].label for i in idx], float),
                    cosine=np.concatenate(cos), train_s=train_s, score_s=score_s)
    return oof, params


def zscore(x: np.ndarray) -> np.ndarray:
    """``x`` standardised by its own mean and spread (no labels)."""
    return (x - x.mean()) / (x.std() or 1.0)


def ensemble(parts: list) -> object:
    """Mean of the members' cosines, each standardised over all its rows first (encoders'
    cosines live on different scales; the transform uses no labels)."""
    z = [zscore(o.cosine) for o in parts]
    return parts[0].with_cosine(np.mean(z, axis=0))


def dev_half_b(folder: Path, name: str, dev: list, mode: str, shrink: float) -> float | None:
    """Mean alpha on dev half B with ``mode``'s cut points fitted on half A (the
    `ordinal_wic.py` protocol), for a setting or an ensemble of settings whose
    ``dev-half.json`` exists; None otherwise."""
    from tagalign.pairs.crossval import pair_key
    from tagalign.pairs.metrics import evaluate
    from tagalign.pairs.thresholds import Thresholds

    saved = []
    for part in name.split("+"):
        path = folder / part / "dev-half.json"
        if not path.exists():
            return None
        saved.append(json.loads(path.read_text("utf-8")))
    by_key = {pair_key(p): p for p in dev}
    halves = {}
    for half in ("a", "b"):
        keys = saved[0][half]["keys"]
        if any(x[half]["keys"] != keys for x in saved):
            raise SystemExit(f"{name}: dev halves of different samples")
        halves[half] = [by_key[k] for k in keys]
    zs = []
    for x in saved:  # standardised per member over both halves, as `ensemble`
        both = np.concatenate([x["a"]["cosine"], x["b"]["cosine"]])
        zs.append(zscore(both))
    cos = np.mean(zs, axis=0) if len(zs) > 1 else np.concatenate(
        [saved[0]["a"]["cosine"], saved[0]["b"]["cosine"]])
    a, b = halves["a"], halves["b"]
    cuts = Thresholds(mode=mode, shrink=shrink).fit(
        cos[:len(a)], [p.label for p in a], [p.language for p in a], [p.lemma for p in a])
    pred = cuts.predict(cos[len(a):], [p.language for p in b])
    return evaluate([p.label for p in b], pred, [p.language for p in b])["mean_alpha"]


def fmt(report) -> str:
    lo, hi = report.mean_interval
    return f"{report.mean_alpha:.3f} [{lo:.3f}, {hi:.3f}]"


def print_tables(args: argparse.Namespace, load_all: Callable) -> None:
    from tagalign.pairs.crossval import cut_point_alpha, dev_lemma_counts
    from tagalign.pairs.validation import lemma_folds

    pairs, dev = load_all(args.data)
    folds = lemma_folds(pairs, args.folds, args.seed)
    fit_lemmas = dev_lemma_counts(dev)
    settings = {}
    for folder in sorted(p for p in args.out.iterdir() if p.is_dir()):
        got = read_setting(folder, pairs, folds, args.eval_per_language)
        if got:
            settings[folder.name] = got
    if not settings:
        raise SystemExit(f"nothing cached under {args.out}")
    langs = sorted(set(next(iter(settings.values()))[0].language.tolist()))
    sizes = ", ".join(f"{k[:3]} {v}" for k, v in fit_lemmas.items())
    print(f"cut points fitted on the other folds' out-of-fold cosines of as many lemmas per "
          f"language as CoMeDi dev holds ({sizes}), {args.repeats} draws; alpha on each "
          "fold's held-out sample; [95 % interval over lemmas]\n")
    candidates = dict(settings)
    members = [n for n in settings if n.startswith(("floor", "usem3"))]
    tuned = [n for n in settings if n not in members]
    if args.ensembles is None:  # every tuned setting with each untuned encoder and all
        wanted = [f"{n}+{m}" for n in tuned for m in members]
        wanted += [f"{n}+{'+'.join(members)}" for n in tuned if len(members) > 1]
    else:
        wanted = [x for x in args.ensembles.split(",") if x]
    for name in wanted:
        if all(part in settings for part in name.split("+")):
            candidates[name] = (ensemble([settings[p][0] for p in name.split("+")]), {})
    chosen = [m for m in MODES if args.modes is None or m[0] in args.modes.split(",")]
    head = ["setting", "cut points", "lemma-CV mean α [95 %]"] + [x[:3] for x in langs] + [
        "dev half B α", "minutes"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    results, dev_b = {}, {}
    for name, (oof, _) in candidates.items():
        parts = [settings[p][0] for p in name.split("+")]
        minutes = sum(sum(o.train_s) + sum(o.score_s) for o in parts) / 60
        modes = chosen if name in tuned or "+" in name else chosen[:1]
        for label, mode, shrink, dev_sized in modes:
            rep = cut_point_alpha(oof, mode, shrink, fit_lemmas if dev_sized else None,
                                  args.repeats, args.seed, n_boot=1000)
            results[(name, label)] = rep
            half_b = dev_half_b(args.out, name, dev, mode, shrink) if dev_sized else None
            dev_b[(name, label)] = half_b
            cells = [name, label, fmt(rep)] + [f"{rep.alpha.get(x, float('nan')):.3f}"
                                               for x in langs] + [
                "-" if half_b is None else f"{half_b:.3f}", f"{minutes:.1f}"]
            print("| " + " | ".join(cells) + " |", flush=True)
    print_issue_table(args, results, dev_b, langs, settings)
    print_paired(args, candidates, fit_lemmas, chosen, tuned)
    out = args.out / "table.json"
    out.write_text(json.dumps({f"{n} | {m}": r.as_dict() for (n, m), r in results.items()},
                              indent=1), "utf-8")
    print(f"\nall figures: {out}")


def print_paired(args: argparse.Namespace, candidates: dict, fit_lemmas: dict,
                 chosen: list, tuned: list[str]) -> None:
    """Each cut-point mode against per-language cut points on the same cosines, per tuned
    setting and ensemble: the difference of mean alpha with its interval over the same
    lemma draws (`tagalign.pairs.validation.paired_difference`)."""
    from tagalign.pairs.crossval import cut_point_predictions
    from tagalign.pairs.validation import paired_difference

    print("\nPaired: each mode minus per-language cut points, same cosines and lemma draws "
          "(mean alpha difference [95 %], share of draws ahead)")
    print("| setting | " + " | ".join(m[0] for m in chosen[1:]) + " |")
    print("|---|" + "---|" * (len(chosen) - 1))
    for name, (oof, _) in candidates.items():
        if name not in tuned and "+" not in name:
            continue
        base = cut_point_predictions(oof, "language", 0.0, fit_lemmas, args.repeats, args.seed)
        cells = []
        for _, mode, shrink, dev_sized in chosen[1:]:
            other = cut_point_predictions(oof, mode, shrink, fit_lemmas if dev_sized else None,
                                          args.repeats, args.seed)
            d = paired_difference(oof.gold, base, other, oof.language, oof.lemma, 1000,
                                  args.seed)
            cells.append(f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] "
                         f"{d['share_b_ahead']:.0%}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def print_issue_table(args: argparse.Namespace, results: dict, dev_b: dict,
                      langs: list[str], settings: dict) -> None:
    """The issue's three rows: the default setting with per-language cut points, the same
    cosines with the best other cut-point mode, and the best of everything measured."""
    base = args.baseline if args.baseline in settings else sorted(settings)[0]
    first = (base, "per-language")
    others = [k for k in results if k[0] == base and k[1] != "per-language"]
    best = max(results, key=lambda k: results[k].mean_alpha)
    rows = [("today's default recipe", first)]
    if others:  # an untuned baseline is cut per language only (see `print_tables`)
        rows.append(("robust cut points", max(others, key=lambda k: results[k].mean_alpha)))
    rows.append(("what pays (best measured)", best))

    def minutes(name: str) -> float:
        return sum(sum(settings[p][0].train_s) + sum(settings[p][0].score_s)
                   for p in name.split("+")) / 60

    print("\n| row | setting · cut points | lemma-CV mean α [95 %] | dev half B α | minutes |")
    print("|---|---|---|---|---|")
    for label, key in rows:
        half_b = dev_b.get(key)
        print(f"| {label} | {key[0]} · {key[1]} | {fmt(results[key])} | "
              f"{'-' if half_b is None else f'{half_b:.3f}'} | {minutes(key[0]):.1f} |")
    print("\n| language | lemmas | " + " | ".join(label for label, _ in rows) + " |")
    print("|---|---|" + "---|" * len(rows))
    for lang in langs:
        cells = []
        for _, key in rows:
            rep = results[key]
            lo, hi = rep.interval[lang]
            cells.append(f"{rep.alpha[lang]:.3f} [{lo:.2f}, {hi:.2f}]")
        print(f"| {lang} | {results[first].lemmas[lang]} | " + " | ".join(cells) + " |")
    print("\nminutes: training plus scoring of every fold (all K folds count), on the 2 "
          "shared cores under the lock; an ensemble counts each member.")
