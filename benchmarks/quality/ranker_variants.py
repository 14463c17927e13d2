#!/usr/bin/env python
"""Issue 66 benchmark: what the ranker's features and table are worth, one stage for all.

Protocol. A default hybrid is trained once on a seeded ``--limit-train`` sample of train
(never a file prefix), its phases kept in ``--workdir`` (a rerun resumes them; the
parameters it trained with are written there, ``params.json``). Each variant then learns
a ranker only, from split B's candidates made by the stage's split-A sources (as
training makes them: `HybridTrainer.stack`, `feature_table`, `HybridTrainer.with_tail`),
and ranks a seeded ``--limit-dev`` dev sample inside the trained model in place of its
own ranker, so the variants differ in nothing else. Printed per variant: avg R@5..20,
F1@5 and the micro recall@5/10/20 of the gold by train frequency (unseen 0, rare 1–4,
common ≥ 5 of the sample's records; `tagalign.evaluate.frequency`), R@20 of the unseen by
language.

Variants (``--variant NAME``, repeatable; default all):

- ``without-meaning``: the ranker without ``label_cos`` and ``has_lang_label`` (the
  features of every candidate that issue 66 added): the ranker before them;
- ``without-tail-evidence``: the ranker without the neighbours' per-subject evidence
  (``tknn_subject_*``, ``eknn_subject_*``) and the label-anchor agreement
  (``label_anchor_*``), the pair features issue 66 added next: the ranker before them;
- ``default``: the default ranker;
- ``tail-0.3``: ``ranker_tail_simulation=0.3`` (that share of split B again, blinded);
- ``labels-80``: the label source's 80 candidates instead of 30, in training and
  suggesting;
- ``nprobe-24``: the label index scanning 24 of its inverted lists a query, as before
  ``labels_nprobe`` (48), in training and suggesting;
- ``lex-scattered``, ``lex-compounds``, ``lex-loose`` (both): the lexical matcher's looser
  matches (`tagalign.suggest.sources.loose`) on, in split B's candidates and suggesting.
  The stage's ``lex_prec`` counts stay those of the exact matches (a training with the
  option counts the looser ones too).
- ``no-title``: the label index searched with the text alone (``labels_title_top_k=0``;
  the default searches with the title too), in split B's candidates and suggesting.

    python -m benchmarks.quality.ranker_variants [--limit-train 20000] [--limit-dev 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from benchmarks._common import add_data_args, recipe_suggestions, seeded_records, seeded_sample
from tagalign.evaluate import evaluate
from tagalign.evaluate.frequency import frequency_report, subject_counts
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.records import read_records
from tagalign.suggest.sources.lexical import MATCHING_OPTIONS
from tagalign.train.phases import PhaseRunner, inputs_fingerprint
from tagalign.train.stacking import feature_table
from tagalign.vocab import load_vocabulary

KS = [5, 10, 20]
#: name → (training parameters changed, features left out, label candidates suggesting,
#: the lexical matcher's options: `LabelMatcher.set_matching`)
VARIANTS: dict[str, tuple[dict, list[str], int | None, dict[str, bool]]] = {
    "without-meaning": ({}, ["label_cos", "has_lang_label"], None, {}),
    "without-tail-evidence": ({}, ["tknn_subject_max", "tknn_subject_mean",
                                   "eknn_subject_max", "eknn_subject_mean",
                                   "label_anchor_max", "label_anchor_mean"], None, {}),
    "default": ({}, [], None, {}),
    "tail-0.3": ({"ranker_tail_simulation": 0.3}, [], None, {}),
    "labels-80": ({"candidates_labels": 80}, [], 80, {}),
    "nprobe-24": ({"labels_nprobe": 24}, [], None, {}),
    "lex-scattered": ({}, [], None, {"scattered": True}),
    "lex-compounds": ({}, [], None, {"compounds": True}),
    "lex-loose": ({}, [], None, {"scattered": True, "compounds": True}),
    "no-title": ({"labels_title_top_k": 0}, [], None, {}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--limit-train", type=int, default=20_000)
    ap.add_argument("--limit-dev", type=int, default=2_000)
    ap.add_argument("--seed", type=int, default=0, help="seed of both samples")
    ap.add_argument("--variant", action="append", choices=list(VARIANTS))
    ap.add_argument("--workdir", type=Path, default=Path("runs/ranker-variants"))
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    vocab = load_vocabulary(args.vocab)
    train = seeded_records(args.train, vocab, args.limit_train, args.seed)
    dev = seeded_sample([r for r in read_records(args.dev, vocab=vocab) if r.subjects],
                        args.limit_dev, args.seed)
    print(f"train: {len(train)} records with gold (seed {args.seed}); dev: {len(dev)} "
          f"records with gold ({sum(r.language == 'de' for r in dev)} de, "
          f"{sum(r.language == 'en' for r in dev)} en)")
    recipe, params = trained(vocab, train, args.workdir)
    counts = subject_counts(train)
    labels = [s for s in recipe.pipeline.sources if s.name == "labels"]
    trained_k = labels[0].config.top_k if labels else None
    lexical = [s for s in recipe.pipeline.sources if s.name == "lexical"]
    trained_matching = {k: getattr(lexical[0].config, k) for k in MATCHING_OPTIONS} \
        if lexical else {}  # what a variant without lexical options leaves as trained
    figures = {}
    for name in args.variant or list(VARIANTS):
        changed, dropped, label_k, matching = VARIANTS[name]
        t0 = time.perf_counter()
        trainer = HybridRecipe(vocab, **{**params, **changed}).trainer()
        runner = PhaseRunner(args.workdir / "phases", quiet=True, inputs=inputs_fingerprint(
            train, vocab.fingerprint, "hybrid", params))
        stage = trainer.stack(train, runner)
        title_k = trainer.config.labels.title_top_k  # a loaded source keeps its saved one
        for pipeline in (stage.pipeline, recipe.pipeline):
            for src in pipeline.sources:
                if src.name == "lexical":
                    src.set_matching(**{**trained_matching, **matching})
                if src.name == "labels":
                    src.config = dataclasses.replace(src.config, title_top_k=title_k)
        table = trainer.with_tail(stage, feature_table(stage.pipeline, stage.ranker_records))
        if dropped:
            keep = [i for i, n in enumerate(table.names) if n not in dropped]
            table.X, table.names = table.X[:, keep], [table.names[i] for i in keep]
        pipe = recipe.pipeline
        pipe.ranker = trainer.fit_ranker(table)
        nprobe = trainer.config.labels.nprobe
        for src in labels:
            src.config = dataclasses.replace(src.config, top_k=label_k or trained_k,
                                             nprobe=nprobe)
            src.index_.probe(nprobe)
        ranked = {r.id: [s.id for s in row]
                  for r, row in zip(dev, recipe_suggestions(recipe, dev, 20), strict=True)}
        overall = evaluate(dev, ranked)["overall"]
        buckets = frequency_report(dev, ranked, counts, KS)
        figures[name] = {"overall": overall, "by_frequency": buckets,
                         "seconds": time.perf_counter() - t0}
        row(name, overall, buckets)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


def trained(vocab, train: list, workdir: Path) -> tuple[HybridRecipe, dict]:
    """The default hybrid trained on ``train`` (once: its phases and model are kept in
    ``workdir`` and read again by a rerun) and the parameters it trained with."""
    done = workdir / "model"
    if done.exists():
        params = json.loads((workdir / "params.json").read_text())
        return HybridRecipe.load(done, vocab), params
    recipe = HybridRecipe(vocab)
    t0 = time.perf_counter()
    recipe.fit(train, workdir=workdir / "phases")
    print(f"trained in {time.perf_counter() - t0:.0f} s")
    recipe.save(done)
    (workdir / "params.json").write_text(json.dumps(recipe.params))
    return recipe, dict(recipe.params)


def _r(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def row(name: str, overall: dict, buckets: dict) -> None:
    cells = "  ".join(f"{b} " + "/".join(_r(m[f"recall@{k}"]) for k in KS)
                      for b, m in buckets["overall"].items())
    unseen = ", ".join(f"{lg} {_r(bs['unseen']['recall@20'])}"
                       for lg, bs in buckets["by_language"].items() if "unseen" in bs)
    print(f"{name:<16} avg R {overall['avg_recall']:.4f}  F1@5 {overall['f1@5']:.4f}  "
          f"{cells}  (unseen R@20: {unseen})")


if __name__ == "__main__":
    main()
