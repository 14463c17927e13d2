#!/usr/bin/env python
"""Issue 66 benchmark: recall on the long tail — dev's gold subjects by how many training
records carry them, and how a heading no record has yet will fare.

Protocol. *Buckets*: each gold subject of each dev record falls in ``unseen`` (no record
of the training records carries it), ``rare`` (1–4) or ``common`` (≥ 5; ``--common-min``),
counted in exactly the records the model trains on (`tagalign.evaluate.frequency`); per
bucket, overall and by language: the share of dev's gold, the micro recall@5/10/20 of the
bucket's gold subjects (found in the top k / gold in the bucket), gold subjects and records.
The model is the default hybrid trained here on ``--train`` (all of it, or a seeded
``--limit-train`` sample, never a file prefix; ``--param`` changes a parameter), or the
saved project ``--project DIR`` (no training), whose training records ``--train`` (and
``--limit-train``, ``--seed``) must name for the counts. Dev: all of ``--dev`` or a seeded
``--limit-dev`` sample (its records by language printed). Rankings: the top 20, no threshold.

*Simulated-new* (``--simulated-new N``, seed ``--seed``): N subjects drawn at random among
those the training records carry **and** the dev sample carries (a subject no dev record
carries has no gold to score, so drawing it would only shrink the sample), stripped from
the gold of every training record (the records stay, without those labels; the
vocabulary keeps the headings, as it holds a heading created tomorrow), a default hybrid
(the project's parameters with ``--project``) trained on that, and the micro recall@5/10/20
of exactly those N subjects on dev printed beside the unseen bucket of the model trained
on everything. A training record left with no subject is kept in the list, but the hybrid
trains only on records with gold (as any training does): their number is printed. So is
the split of the N subjects' train frequencies before stripping, by subject and by their
dev gold (they are drawn per subject, not per gold pair), so a reader sees how many of
them were rare and how many common: what the row measures.

*Label-only precision*: of the top 5 of each dev record, the share of suggestions that
only label-reading sources proposed (`tagalign.evaluate.label_only`: every source its
reasons name reads labels, ``labels`` and ``lexical`` in the default hybrid), how many of
them are in the gold, and the precision of the other top-5 suggestions beside it, overall
and by language (of the model trained on everything).

    python -m benchmarks.quality.tail [--limit-train N] [--limit-dev N] [--simulated-new 2000]
    python -m benchmarks.quality.tail --project DIR --train TRAIN [--simulated-new 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks._common import add_data_args, recipe_suggestions, seeded_sample, suggestions
from tagalign.evaluate import evaluate
from tagalign.evaluate.frequency import (
    COMMON_MIN,
    bucket_of,
    frequency_report,
    subject_counts,
    subject_recall,
)
from tagalign.evaluate.label_only import LABEL_ONLY_K, label_only_precision
from tagalign.project import Project
from tagalign.project.config import saved_params
from tagalign.project.jobs import DEFAULT_JOBS
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.records import Record, read_records
from tagalign.suggest.sources import SOURCES
from tagalign.vocab import Vocabulary, load_vocabulary

KS = [5, 10, 20]
#: train-count bins of the withheld subjects' split (lower bounds; the last is open)
BINS = [1, 2, 5, 10, 50, 200]


def train_hybrid(vocab: Vocabulary, params: dict, train: list[Record], workdir: Path
                 ) -> HybridRecipe:
    """A hybrid with ``params`` fitted on ``train`` (as `benchmarks.quality.hybrid`)."""
    recipe = HybridRecipe(vocab, **params)
    t0 = time.perf_counter()
    recipe.fit(train, workdir=workdir)
    print(f"hybrid trained on {len(train)} records ({sum(bool(r.subjects) for r in train)} "
          f"with gold) in {time.perf_counter() - t0:.0f} s")
    return recipe


def dev_rankings(model, dev: list[Record]) -> dict[str, list[tuple[str, list[str]]]]:
    """The top 20 (no threshold) of each dev record as (subject id, the sources that
    proposed it): a saved project on `tagalign suggest`'s path (default ``--jobs``), a
    fitted recipe in this process."""
    t0 = time.perf_counter()
    if isinstance(model, Project):
        rows = suggestions(model, dev, limit=20, threshold=0.0, jobs=DEFAULT_JOBS)
    else:
        rows = recipe_suggestions(model, dev, 20)
    print(f"suggested {len(dev)} dev records in {time.perf_counter() - t0:.0f} s")
    return {r.id: [(s.id, list(s.reasons.get("sources", ()))) for s in row]
            for r, row in zip(dev, rows, strict=True)}


def ids(ranked: dict[str, list[tuple[str, list[str]]]]) -> dict[str, list[str]]:
    """Each record's ranking of subject ids alone."""
    return {rid: [sid for sid, _ in row] for rid, row in ranked.items()}


def label_only(dev: list[Record], ranked: dict[str, list[tuple[str, list[str]]]]) -> dict:
    """The label-only figures of the top 5 (`tagalign.evaluate.label_only`), printed: the
    label-reading sources are those among the rankings' whose class `reads_labels`."""
    names = {src for row in ranked.values() for _, sources in row for src in sources}
    readers = {n for n in names if SOURCES[n].reads_labels}
    report = label_only_precision(dev, ranked, readers, LABEL_ONLY_K)
    print(f"\nLabel-only suggestions in the top {LABEL_ONLY_K} (proposed by "
          f"{', '.join(sorted(readers)) or 'no source'} alone) and the other ones")
    head = (f"{'group':<8}{'top-5':>8}{'label-only':>12}{'share':>8}{'right':>8}{'prec':>8}"
            f"{'other':>8}{'right':>8}{'prec':>8}")
    print(f"{head}\n{'-' * len(head)}")
    for group, m in {"all": report["overall"], **report["by_language"]}.items():
        print(f"{group:<8}{m['suggestions']:8d}{m['label_only']:12d}{_share(m['share'])}"
              f"{m['label_only_right']:8d}{_share(m['label_only_precision'])}"
              f"{m['other']:8d}{m['other_right']:8d}{_share(m['other_precision'])}")
    return report


def prefer_exact(project: Project) -> None:
    """The saved hybrid's lexical matcher told to prefer exact spellings."""
    sources = getattr(project.recipe, "pipeline", None)
    lexical = [s for s in getattr(sources, "sources", ()) if s.name == "lexical"]
    if not lexical:
        raise SystemExit("--lexical-prefer-exact: the project has no lexical source")
    lexical[0].set_matching(prefer_exact=True)
    print("lexical: prefer_exact on at suggestion time (the ranker trained without it)")


def _share(x: float | None) -> str:
    return "       –" if x is None else f"{x:8.4f}"


def _recalls(m: dict) -> str:
    return "".join("      –" if m[f"recall@{k}"] is None else f"{m[f'recall@{k}']:7.4f}"
                   for k in KS)


def _head(first: str) -> str:
    head = f"{'group':<8}{first:<30}{'share':>8}{'gold':>8}{'records':>9}" + "".join(
        f"{'R@' + str(k):>7}" for k in KS)
    return f"{head}\n{'-' * len(head)}"


def _row(group: str, name: str, m: dict) -> str:
    return (f"{group:<8}{name:<30}{m['share']:8.1%}{m['gold']:8d}{m['records']:9d}"
            + _recalls(m))


def print_buckets(title: str, report: dict) -> None:
    print(f"\n{title}")
    print(_head("bucket"))
    groups = {"all": report["overall"], **report["by_language"]}
    for group, buckets in groups.items():
        for i, (bucket, m) in enumerate(buckets.items()):
            print(_row(group if i == 0 else "", bucket, m))


def print_simulated(n: int, seed: int, buckets: dict, withheld: dict) -> None:
    print(f"\nSimulated-new: {n} subjects withheld from training (seed {seed}), beside the "
          "unseen bucket of the model trained on everything")
    print(_head("subjects"))
    groups = ["all", *sorted(set(buckets["by_language"]) | set(withheld["by_language"]))]
    for group in groups:
        unseen = (buckets["overall"] if group == "all"
                  else buckets["by_language"].get(group, {})).get("unseen")
        new = withheld["overall"] if group == "all" else withheld["by_language"].get(group)
        if unseen is not None:
            print(_row(group, "unseen (full model)", unseen))
        if new is not None:
            print(_row("" if unseen is not None else group, f"simulated-new ({n} withheld)",
                       new))


def choose_withheld(train: list[Record], dev: list[Record], n: int,
                    rng: np.random.Generator) -> list[str]:
    """``n`` subjects drawn with ``rng`` among those both ``train`` and ``dev`` carry (all
    of them when fewer), sorted (`benchmarks.quality.gnd_changes` draws its new headings
    so too, then the rest of its workload from the same ``rng``)."""
    pool = sorted(set(subject_counts(train)) & set(subject_counts(dev)))
    if n >= len(pool):
        print(f"only {len(pool)} subjects are carried by both train and dev: all withheld")
        return pool
    pick = rng.choice(len(pool), n, replace=False)
    return sorted(pool[i] for i in pick)


def strip(train: list[Record], withheld: set[str]) -> tuple[list[Record], dict]:
    """The training records without the withheld subjects in their gold, and counts."""
    out, touched, emptied = [], 0, 0
    for rec in train:
        kept = [s for s in rec.subjects if s not in withheld]
        if len(kept) < len(rec.subjects):
            touched += 1
            emptied += not kept
        out.append(dataclasses.replace(rec, subjects=kept))
    return out, {"records_touched": touched, "records_left_without_subject": emptied}


def frequency_split(withheld: list[str], counts: Counter[str], dev: list[Record]) -> list:
    """Per train-count bin: the withheld subjects and their dev gold pairs in it."""
    chosen = set(withheld)
    gold = Counter(s for r in dev for s in set(r.subjects) if s in chosen)
    rows = []
    for i, low in enumerate(BINS):
        high = BINS[i + 1] if i + 1 < len(BINS) else None
        inside = [s for s in withheld if counts[s] >= low and (high is None or counts[s] < high)]
        name = (f"{low}" if high == low + 1 else f"≥{low}" if high is None
                else f"{low}–{high - 1}")
        rows.append({"train_records": name, "subjects": len(inside),
                     "dev_gold": sum(gold[s] for s in inside)})
    return rows


def print_split(rows: list, withheld: list[str], counts: Counter[str]) -> None:
    total_s = sum(r["subjects"] for r in rows) or 1
    total_g = sum(r["dev_gold"] for r in rows) or 1
    print(f"\nThe withheld subjects by their train frequency before stripping (median "
          f"{np.median([counts[s] for s in withheld]):.0f} records):")
    print(f"{'train records':<16}{'subjects':>10}{'share':>8}{'dev gold':>10}{'share':>8}")
    for r in rows:
        print(f"{r['train_records']:<16}{r['subjects']:>10}{r['subjects'] / total_s:8.1%}"
              f"{r['dev_gold']:>10}{r['dev_gold'] / total_g:8.1%}")


def load_data(args: argparse.Namespace) -> tuple[Vocabulary, list[Record], list[Record]]:
    vocab = Vocabulary.load(args.project) if args.project else load_vocabulary(args.vocab)
    train = seeded_sample(list(read_records(args.train, vocab=vocab)), args.limit_train,
                          args.seed)
    dev = seeded_sample(list(read_records(args.dev, vocab=vocab)), args.limit_dev, args.seed)
    langs = Counter(r.language for r in dev)
    print(f"train {len(train)} records ({args.train}), dev {len(dev)} records (seed "
          f"{args.seed}: " + ", ".join(f"{k} {n}" for k, n in langs.most_common()) + f"), "
          f"vocabulary {len(vocab)}")
    return vocab, train, dev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--limit-train", type=int, help="a seeded sample of train (default all)")
    ap.add_argument("--limit-dev", type=int, help="a seeded sample of dev (default all)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the samples and of the withheld subjects")
    ap.add_argument("--project", type=Path,
                    help="score this saved project (trained on --train) instead of training")
    ap.add_argument("--param", action="append", default=[], help="recipe parameter key=JSON")
    ap.add_argument("--common-min", type=int, default=COMMON_MIN,
                    help="train records from which a subject is common (rare: 1 to this − 1)")
    ap.add_argument("--simulated-new", type=int, default=0, metavar="N",
                    help="also withhold N subjects from training and score exactly those")
    ap.add_argument("--lexical-prefer-exact", action="store_true",
                    help="with --project: its lexical matcher tells stems apart by spelling "
                         "(prefer_exact) at suggestion time, its ranker trained without")
    ap.add_argument("--ceiling", action="store_true",
                    help="also the share of each bucket's gold among the hybrid's candidates")
    ap.add_argument("--workdir", type=Path, default=Path("runs/tail-bench"))
    ap.add_argument("--json", type=Path, help="also write all figures to this JSON file")
    args = ap.parse_args()
    vocab, train, dev = load_data(args)
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    if args.project:
        config = Project.read_config(args.project)
        if args.simulated_new and config.recipe != "hybrid":
            raise SystemExit(f"--simulated-new trains a hybrid; {args.project} is a "
                             f"{config.recipe} project")
        model: object = Project.load(args.project)
        if args.lexical_prefer_exact:
            prefer_exact(model)
        params = {**saved_params(args.project, config), **params}
        print(f"project {args.project}")
    else:
        model = train_hybrid(vocab, params, train, args.workdir / "full")
    counts = subject_counts(train)
    ranked = dev_rankings(model, dev)
    ceiling = candidate_ceiling(model, dev, counts, args.common_min) if args.ceiling else None
    del model  # a second training (--simulated-new) need not hold the first model too
    full = ids(ranked)
    overall = evaluate(dev, full)["overall"]
    print(f"overall: avg R@5..20 {overall['avg_recall']:.4f}, F1@5 {overall['f1@5']:.4f}")
    buckets = frequency_report(dev, full, counts, KS, args.common_min)
    print_buckets(f"Recall by train frequency on dev (unseen 0, rare 1–{args.common_min - 1}, "
                  f"common ≥{args.common_min} of the {len(train)} training records; micro "
                  "recall of the bucket's gold)", buckets)
    figures: dict = {"dev_records": len(dev), "train_records": len(train), "overall": overall,
                     "by_frequency": buckets, "label_only": label_only(dev, ranked)}
    if ceiling is not None:
        figures["ceiling"] = ceiling
    if args.simulated_new:
        figures["simulated_new"] = simulated_new(args, vocab, params, train, dev, counts,
                                                 buckets)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
        print(f"figures written to {args.json}")


def candidate_ceiling(model, dev: list[Record], counts: Counter[str], common_min: int
                      ) -> dict:
    """Per bucket, overall and by language: the share of the gold that any source
    proposed as a candidate (what a ranking of any depth can reach) and the share the
    label-reading sources proposed (`Source.reads_labels`), of a hybrid's candidates for
    the dev records, printed."""
    recipe = model.recipe if isinstance(model, Project) else model
    pipe = getattr(recipe, "pipeline", None)
    if pipe is None:
        raise SystemExit("--ceiling reads a hybrid's candidates")
    readers = [j for j, s in enumerate(pipe.sources) if s.reads_labels]
    tally: dict[str, Counter[str]] = {}
    for start in range(0, len(dev), 512):
        chunk = dev[start:start + 512]
        rows, cols, _, _, support = pipe.features(pipe.prepare(chunk))
        by_label = support[:, readers].any(axis=1)
        # the candidates come grouped by record, in row order (`merge`)
        bounds = np.searchsorted(rows, np.arange(len(chunk) + 1))
        for i, rec in enumerate(chunk):
            a, b = bounds[i], bounds[i + 1]
            anyone = set(cols[a:b].tolist())
            labelled = set(cols[a:b][by_label[a:b]].tolist())
            for sid in set(rec.subjects):
                if sid not in pipe.vocab:
                    continue
                pos = pipe.vocab.position(sid)
                bucket = bucket_of(counts.get(sid, 0), common_min)
                for group in ("all", rec.language):
                    t = tally.setdefault(f"{group}/{bucket}", Counter())
                    t["gold"] += 1
                    t["candidates"] += pos in anyone
                    t["label_sources"] += pos in labelled
    print("\nThe gold among the candidates (any source; the label-reading sources)")
    head = f"{'group':<8}{'bucket':<10}{'gold':>8}{'any':>8}{'labels':>8}"
    print(f"{head}\n{'-' * len(head)}")
    out: dict[str, dict] = {}
    for key in sorted(tally, key=lambda k: (k.split("/")[0] != "all", k)):
        t = tally[key]
        out[key] = {"gold": t["gold"], "candidates": t["candidates"] / t["gold"],
                    "label_sources": t["label_sources"] / t["gold"]}
        group, bucket = key.split("/")
        print(f"{group:<8}{bucket:<10}{t['gold']:8d}{out[key]['candidates']:8.4f}"
              f"{out[key]['label_sources']:8.4f}")
    return out


def simulated_new(args: argparse.Namespace, vocab: Vocabulary, params: dict,
                  train: list[Record], dev: list[Record], counts: Counter[str],
                  buckets: dict) -> dict:
    """The simulated-new protocol (the module docstring): its figures, printed."""
    withheld = choose_withheld(train, dev, args.simulated_new,
                               np.random.default_rng(args.seed))
    stripped, stats = strip(train, set(withheld))
    print(f"\nsimulated-new: {len(withheld)} subjects withheld from {stats['records_touched']}"
          f" training records; {stats['records_left_without_subject']} of them are left "
          "without any subject (kept, but the hybrid trains only on records with gold)")
    split = frequency_split(withheld, counts, dev)
    print_split(split, withheld, counts)
    recipe = train_hybrid(vocab, params, stripped, args.workdir / "simulated-new")
    ranked = ids(dev_rankings(recipe, dev))
    scores = subject_recall(dev, ranked, withheld, KS)
    print_simulated(len(withheld), args.seed, buckets, scores)
    overall = evaluate(dev, ranked)["overall"]
    print(f"the stripped model overall: avg R@5..20 {overall['avg_recall']:.4f}, F1@5 "
          f"{overall['f1@5']:.4f}")
    return {"subjects": withheld, **stats, "train_frequency_split": split,
            "recall": scores, "overall": overall}


if __name__ == "__main__":
    main()
