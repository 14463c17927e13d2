#!/usr/bin/env python
"""Issue 4 benchmark: the `hybrid` recipe against an Annif-style Omikuji baseline.

Protocol (no hand-picking on dev): every model learns from train only; the hybrid's
ranker learns from a 15 % hash-split slice of train held out from its sources; dev is
only scored. Prints quality at k = 5, 10, 15, 20 (overall, by language, by record type),
the cost of each training phase (time, RSS), suggest records/s and peak RSS, and with
``--ablation`` a table of each source alone and of the fusion without each source
(measured at the stacking stage: sources fit on split A, ranker on split B).

    python -m benchmarks.quality.hybrid [--train ...] [--dev ...] [--limit-train N] [--ablation]

Issue 18's figures, each beside the figure when the issue was filed and its target, close
the output (full train, full dev: the issue's protocol). With ``--save-project P
--serve-check N`` the saved project is also served by `tagalign serve` in its own process
(`serve_latency.py`, N seeded single-record requests) for the REST p95 and the server's RSS.
``--limit-train``/``--limit-dev`` draw seeded samples (``--seed``), never a file prefix.

Issue 33's table closes it too: Annif's F1@5 and NDCG (as `tagalign eval` computes them on
the top 20, no threshold) per language, the task's avg R@5..20 overall, by language and for
Thesis records, training seconds and suggest records/s, beside the figures when the issue
was filed and the GermEval-2025 winner's dev report. Suggest is timed on the path of
`tagalign suggest` with its default ``--jobs`` (processes forked from the loaded project).
``--project P`` scores a saved project instead of training one (``--train-seconds`` gives
its measured training time for the table).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import (
    add_data_args,
    peak_rss_gb,
    recipe_suggestions,
    seeded_sample,
    suggestions,
)
from tagalign.cli.common import make_runtime
from tagalign.evaluate import evaluate
from tagalign.evaluate.selection import ScoredHits, selection_metrics
from tagalign.project import Project
from tagalign.project.jobs import DEFAULT_JOBS, resolve_jobs
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.recipes.lexical import rule_score
from tagalign.records import read_records
from tagalign.suggest.fusion import FusionRanker, top_k
from tagalign.suggest.sources.base import Candidates
from tagalign.suggest.sources.memory import label_matrix
from tagalign.suggest.sources.omikuji import OmikujiSource
from tagalign.text import Analyzer
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.train.phases import PhaseRunner
from tagalign.train.stacking import feature_table
from tagalign.vocab import Vocabulary, load_vocabulary

KS = [5, 10, 15, 20]
#: the feature that ranks each source's candidates when it stands alone
ALONE = {"omikuji": "omikuji_score", "tfidf_knn": "tknn_vote", "emb_knn": "eknn_vote",
         "labels": "label_sim", "lexical": None}



def score(records, ranked_ids) -> dict:
    return evaluate(records, {r.id: ids for r, ids in zip(records, ranked_ids, strict=True)},
                    ks=KS)


def omikuji_baseline(train, dev, vocab) -> dict:
    """Annif's Omikuji settings: stemmed TF-IDF words, cluster_balanced=False, cluster_k=100,
    max_depth=3, one model per language."""
    an = Analyzer()
    langs = [r.language or "de" for r in train]
    tokens = [an.tokens(r.text, lg) for r, lg in zip(train, langs, strict=True)]
    feat = TfidfFeaturizer(min_df=1, max_df=1.0, sublinear_tf=False).fit(tokens, langs)
    ctx = type("Ctx", (), {"tfidf": feat.transform(tokens, langs),
                           "Y": label_matrix(train, vocab)})
    src = OmikujiSource(top_k=20)
    t0 = time.perf_counter()
    src.fit(ctx)
    train_s = time.perf_counter() - t0
    dlangs = [r.language or "de" for r in dev]
    dtok = [an.tokens(r.text, lg) for r, lg in zip(dev, dlangs, strict=True)]
    batch = type("B", (), {"tfidf": feat.transform(dtok, dlangs)})
    c = src.candidates(batch)
    ranked = top_k(c.rows, c.cols, c.feats[:, 0], len(dev), 20)
    ids = [[vocab.subjects[p].id for p, _, _ in row] for row in ranked]
    return {"train_s": train_s, "scores": score(dev, ids)}


def print_table(title: str, rows: dict[str, dict]) -> None:
    print(f"\n{title}")
    head = f"{'system':<34}{'avgR':>7}" + "".join(f"{'R@' + str(k):>7}" for k in KS) + \
        f"{'P@5':>7}{'F1@5':>7}{'F1@10':>7}"
    print(head)
    print("-" * len(head))
    for name, m in rows.items():
        print(f"{name:<34}{m['avg_recall']:7.4f}" + "".join(f"{m[f'recall@{k}']:7.4f}" for k in KS)
              + f"{m['precision@5']:7.4f}{m['f1@5']:7.4f}{m['f1@10']:7.4f}")


def breakdown(scores: dict, other: dict) -> None:
    print(f"\n{'group':<20}{'n':>7}{'hybrid avgR':>13}{'F1@5':>7}{'omikuji avgR':>14}{'F1@5':>7}")
    for key in ("by_language", "by_type"):
        for g, m in scores[key].items():
            o = other[key].get(g, {})
            print(f"{g:<20}{m['n']:>7}{m['avg_recall']:13.4f}{m['f1@5']:7.4f}"
                  f"{o.get('avg_recall', float('nan')):14.4f}{o.get('f1@5', float('nan')):7.4f}")


def ablation(recipe: HybridRecipe, train, dev, workdir: Path) -> None:
    stage = recipe.trainer().stack(train, PhaseRunner(workdir, quiet=True))
    tb = feature_table(stage.pipeline, stage.ranker_records)
    td = feature_table(stage.pipeline, dev)
    names = [s.name for s in stage.pipeline.sources]
    vocab = recipe.vocab
    rows: dict[str, dict] = {}

    def ids_of(ranked):
        return [[vocab.subjects[p].id for p, _, _ in row] for row in ranked]

    for j, name in enumerate(names):
        m = td.support[:, j]
        if ALONE[name] is None:
            s = rule_score(Candidates(td.rows[m], td.cols[m], td.X[m], td.names))
        else:
            s = td.X[m, td.names.index(ALONE[name])]
        rows[f"{name} alone"] = score(dev, ids_of(top_k(td.rows[m], td.cols[m], s,
                                                        len(dev), 20)))["overall"]
    for drop in [None, *names]:
        keep = [j for j, n in enumerate(names) if n != drop]
        mb, md = tb.support[:, keep].any(1), td.support[:, keep].any(1)
        prefixes = {"omikuji": "omikuji_", "tfidf_knn": "tknn_", "emb_knn": "eknn_",
                    "labels": "label_", "lexical": "lex_"}
        cols = [i for i, f in enumerate(tb.names)
                if drop is None or not f.startswith(prefixes[drop])]
        ranker = FusionRanker(num_rounds=recipe.params["ranker_rounds"]).fit(
            tb.X[mb][:, cols], tb.y[mb], tb.rows[mb], [tb.names[i] for i in cols])
        s = ranker.predict(td.X[md][:, cols])
        label = "fusion (all sources)" if drop is None else f"fusion without {drop}"
        rows[label] = score(dev, ids_of(top_k(td.rows[md], td.cols[md], s, len(dev),
                                              20)))["overall"]
    print_table("Ablation at the stacking stage (sources on split A, ranker on split B)", rows)


#: issue 18: (figure, the README's figure when the issue was filed, target, higher is better)
ISSUE18 = [
    ("avg R@5..20", "0.666–0.669", 0.70, True),
    ("F1@5", "0.376", 0.40, True),
    ("English avg R@5..20", "about 0.65", None, True),  # target: German − 0.02
    ("Thesis avg R@5..20", "about 0.54", 0.60, True),
    ("training s (all 90,452)", "816 idle", 900, False),
    ("suggest records/s", "179 (2,000); 144", 400, True),
    ("peak RSS train GB", "4.3", 4.5, False),
    ("serve RSS GB", "1.8", 1.8, False),
    ("REST p95 ms", "24–27", 20, False),
]


def issue18_table(now: dict[str, float | None]) -> None:
    print("\nIssue 18 figures (today = when the issue was filed; 'met' only for a figure "
          "measured here)")
    print(f"{'figure':<26}{'today':>20}{'now':>10}{'target':>10}  met")
    for name, today, target, higher in ISSUE18:
        value = now.get(name)
        if name.startswith("English"):
            german = now.get("German avg R@5..20")
            target = None if german is None else round(german - 0.02, 4)
        met = "" if value is None or target is None else \
            ("yes" if (value >= target if higher else value <= target) else "no")
        shown = "–" if value is None else f"{value:.4g}"
        print(f"{name:<26}{today:>20}{shown:>10}{'–' if target is None else target:>10}  {met}")


#: issue 33: (figure, when the issue was filed, target, higher is better, GermEval-2025
#: winner's dev report: Annif's `eval`, limit 20, NatLibFi/Annif-LLMs4Subjects-GermEval2025)
ISSUE33 = [
    ("English F1@5 (Annif)", "0.336", 0.360, True, "0.355"),
    ("English NDCG (Annif)", "0.606", 0.640, True, "0.633"),
    ("German F1@5 (Annif)", "0.368", 0.368, True, "0.351"),
    ("German NDCG (Annif)", "0.657", 0.657, True, "0.626"),
    ("English avg R@5..20", "0.6585", None, True, ""),  # target: German − 0.02
    ("German avg R@5..20", "0.693", None, True, ""),
    ("avg R@5..20", "0.6758", 0.69, True, ""),
    ("F1@5", "0.3824", 0.39, True, ""),
    ("Thesis avg R@5..20", "0.5535", 0.58, True, ""),
    ("training s (all 90,452)", "711–782", 900, False, "(A100s)"),
    ("suggest records/s", "302–328", 400, True, ""),
]


def annif_by_language(records, rows) -> dict[str, dict[str, float]]:
    """Annif's metrics of the top-20 rankings (with scores) per language, as `tagalign
    eval` computes them on a predictions file of limit 20 without a threshold."""
    out = {}
    for lang in sorted({r.language for r in records if r.subjects}):
        keep = [i for i, r in enumerate(records) if r.subjects and r.language == lang]
        sh = ScoredHits.build([set(records[i].subjects) for i in keep],
                              [[(s.id, s.score) for s in rows[i]] for i in keep])
        out[lang] = selection_metrics(sh, 20, 0.0)
    return out


def issue33_table(now: dict[str, float | None]) -> None:
    print("\nIssue 33 figures (today = when the issue was filed; Annif's metrics as its "
          "`eval` at limit 20; 'met' only for a figure measured here)")
    print(f"{'figure':<26}{'today':>10}{'now':>10}{'target':>10}{'winner':>10}  met")
    for name, today, target, higher, winner in ISSUE33:
        value = now.get(name)
        if name == "English avg R@5..20":
            german = now.get("German avg R@5..20")
            target = None if german is None else round(german - 0.02, 4)
        met = "" if value is None or target is None else \
            ("yes" if (value >= target if higher else value <= target) else "no")
        shown = "–" if value is None else f"{value:.4g}"
        print(f"{name:<26}{today:>10}{shown:>10}{'–' if target is None else target:>10}"
              f"{winner:>10}  {met}")


def command_suggest(path: Path, dev) -> tuple[list, float]:
    """Suggestions (limit 20) for ``dev`` on `tagalign suggest`'s path: the project at
    ``path`` loaded as the command loads it (its runtime: threads shared out, the ranker
    compiled) and tagged with its default ``--jobs``, after a warm-up of 200 records;
    (rows, records/s)."""
    project = Project.load(path, runtime=make_runtime(0, compile_ranker=True))
    suggestions(project, dev[:200], limit=20)
    t0 = time.perf_counter()
    rows = suggestions(project, dev, limit=20, jobs=DEFAULT_JOBS)
    rps = len(dev) / (time.perf_counter() - t0)
    print(f"suggest (tagalign suggest's path, --jobs {DEFAULT_JOBS} = "
          f"{resolve_jobs(DEFAULT_JOBS)} processes): {len(dev)} records = {rps:.0f} records/s")
    return rows, rps


def serve_check(project: Path, requests: int) -> dict:
    """REST p95 and server RSS of the saved project (`serve_latency.py`, own process)."""
    out = Path(tempfile.mkdtemp()) / "serve.jsonl"
    subprocess.run([sys.executable, "-m", "benchmarks.serve.serve_latency",
                    "--project", str(project), "--requests", str(requests), "--clients", "0",
                    "--json", str(out)], check=True)
    return json.loads(out.read_text().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--limit-train", type=int)
    ap.add_argument("--limit-dev", type=int)
    ap.add_argument("--workdir", type=Path, default=Path("runs/hybrid-bench"))
    ap.add_argument("--ablation", action="store_true")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--param", action="append", default=[], help="recipe parameter key=JSON")
    ap.add_argument("--json", type=Path, help="also write all figures to this JSON file")
    ap.add_argument("--save-project", type=Path,
                    help="save the trained hybrid as a project here (for serve benchmarks)")
    ap.add_argument("--serve-check", type=int, default=0, metavar="N",
                    help="with --save-project: serve it and send N single-record requests")
    ap.add_argument("--project", type=Path,
                    help="score this saved project on dev instead of training one")
    ap.add_argument("--train-seconds", type=float,
                    help="with --project: its measured training seconds, for the table")
    ap.add_argument("--seed", type=int, default=0, help="seed of the --limit-* samples")
    args = ap.parse_args()
    if args.project:
        return score_saved(args)


    vocab = load_vocabulary(args.vocab)
    train = seeded_sample(list(read_records(args.train, vocab=vocab)), args.limit_train,
                          args.seed)
    dev = seeded_sample(list(read_records(args.dev, vocab=vocab)), args.limit_dev, args.seed)
    print(f"train {len(train)} records, dev {len(dev)} records, vocabulary {len(vocab)}")
    params = dict(p.split("=", 1) for p in args.param)
    recipe = HybridRecipe(vocab, **{k: json.loads(v) for k, v in params.items()})
    t0 = time.perf_counter()
    recipe.fit(train, workdir=args.workdir)
    train_s = time.perf_counter() - t0
    train_rss = peak_rss_gb()
    # the first batch compiles the ranker's trees (cached afterwards): timed apart
    t0 = time.perf_counter()
    recipe_suggestions(recipe, dev[:200], 20)
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    preds = recipe_suggestions(recipe, dev, 20)
    suggest_s = time.perf_counter() - t0
    hybrid = score(dev, [[s.id for s in row] for row in preds])
    peak = peak_rss_gb()
    print("\nTraining phases (2-core figures only when run on 2 cores):")
    for name, t in recipe.timings_.items():
        print(f"  {name:<36}{t['seconds']:8.1f} s   RSS {t['rss_gb']:.2f} GB")
    print(f"  {'total':<36}{train_s:8.1f} s   peak RSS {train_rss:.2f} GB")
    print(f"suggest: {len(dev) / suggest_s:.0f} records/s (batch), peak RSS {peak:.2f} GB; "
          f"warm-up of 200 records before it (compiles the ranker on first use): {warm_s:.1f} s")
    rows = {"hybrid": hybrid["overall"]}
    base = None
    if not args.no_baseline:
        base = omikuji_baseline(train, dev, vocab)
        rows["omikuji baseline (Annif settings)"] = base["scores"]["overall"]
        print(f"omikuji baseline trained in {base['train_s']:.0f} s")
    print_table("Quality on dev", rows)
    if base:
        breakdown(hybrid, base["scores"])
        gain = hybrid["overall"]["avg_recall"] - base["scores"]["overall"]["avg_recall"]
        print(f"\navg recall gain over the Omikuji baseline: {gain:+.4f} (target ≥ +0.05); "
              f"hybrid F1@5 {hybrid['overall']['f1@5']:.4f} (target ≥ 0.35)")
    if args.json:
        args.json.write_text(json.dumps({"hybrid": hybrid, "baseline": base,
                                         "timings": recipe.timings_, "train_s": train_s,
                                         "suggest_rps": len(dev) / suggest_s,
                                         "peak_rss_gb": peak}, indent=1))
    project = Project.create(args.save_project or args.workdir / "project", vocab, "hybrid",
                             recipe.params, overwrite=True)
    project.save_model(recipe)
    project.set_scores(hybrid["overall"])
    print(f"project saved to {project.path}")
    command_rows, command_rps = command_suggest(project.path, dev)
    serve = serve_check(args.save_project, args.serve_check) \
        if args.save_project and args.serve_check else {}
    lang, typ = hybrid["by_language"], hybrid["by_type"]
    issue18_table({
        "avg R@5..20": hybrid["overall"]["avg_recall"], "F1@5": hybrid["overall"]["f1@5"],
        "English avg R@5..20": lang.get("en", {}).get("avg_recall"),
        "German avg R@5..20": lang.get("de", {}).get("avg_recall"),
        "Thesis avg R@5..20": typ.get("Thesis", {}).get("avg_recall"),
        "training s (all 90,452)": train_s, "suggest records/s": len(dev) / suggest_s,
        "peak RSS train GB": train_rss,
        "serve RSS GB": serve["rss_queries"]["rss"] / 1024 if serve else None,
        "REST p95 ms": serve.get("p95_ms")})
    command_task = score(dev, [[s.id for s in row] for row in command_rows])
    issue33_table(issue33_figures(dev, command_rows, command_task, train_s, command_rps))
    if args.ablation:
        ablation(recipe, train, dev, args.workdir)


def issue33_figures(dev, rows, task: dict, train_s: float | None, rps: float) -> dict:
    """Issue 33's figures of ``rows`` (suggestions with scores, limit 20) on ``dev``, whose
    task scores (`score`) are ``task``."""
    annif = annif_by_language(dev, rows)
    lang, typ = task["by_language"], task["by_type"]
    figures: dict[str, float | None] = {
        "avg R@5..20": task["overall"]["avg_recall"], "F1@5": task["overall"]["f1@5"],
        "English avg R@5..20": lang.get("en", {}).get("avg_recall"),
        "German avg R@5..20": lang.get("de", {}).get("avg_recall"),
        "Thesis avg R@5..20": typ.get("Thesis", {}).get("avg_recall"),
        "training s (all 90,452)": train_s, "suggest records/s": rps}
    for code, name in (("en", "English"), ("de", "German")):
        if code in annif:
            figures[f"{name} F1@5 (Annif)"] = annif[code]["F1@5"]
            figures[f"{name} NDCG (Annif)"] = annif[code]["NDCG"]
    return figures


def score_saved(args: argparse.Namespace) -> None:
    """``--project``: a saved project's issue-33 figures on dev (no training)."""
    dev = seeded_sample(list(read_records(args.dev, vocab=Vocabulary.load(args.project))),
                        args.limit_dev, args.seed)
    print(f"project {args.project}, dev {len(dev)} records")
    rows, rps = command_suggest(args.project, dev)
    task = score(dev, [[s.id for s in row] for row in rows])
    print_table("Quality on dev", {"hybrid": task["overall"]})
    for key in ("by_language", "by_type"):
        for g, m in task[key].items():
            print(f"  {g:<12}{m['n']:>7}  avgR {m['avg_recall']:.4f}  F1@5 {m['f1@5']:.4f}")
    figures = issue33_figures(dev, rows, task, args.train_seconds, rps)
    issue33_table(figures)
    if args.json:
        args.json.write_text(json.dumps({"task": task, "issue33": figures}, indent=1))


if __name__ == "__main__":
    main()
