"""`tagalign optimize` (best limit/threshold) and `tagalign hyperopt` (suggest-time
parameters with Optuna): Annif's tuning commands over a trained project."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from tagalign.cli.app import app, console, refuse
from tagalign.cli.common import load_records
from tagalign.errors import MissingExtraError
from tagalign.evaluate.optimize import LIMITS, METRICS, GridResult, grid_search, plot_pareto
from tagalign.evaluate.selection import ScoredHits
from tagalign.io import atomic_text
from tagalign.project import Project, Tagger
from tagalign.records import Record
from tagalign.suggest import SuggestRequest
from tagalign.suggest.sources.base import record_languages
from tagalign.workflows.tagging import load_trained

DEPTH = max(LIMITS)
out = Console()  # results on stdout; progress and logs go to `console` (stderr)


def _scored(project: Project, records: list[Record]) -> ScoredHits:
    start = time.perf_counter()
    rows = [t.suggestions for t in Tagger(project).tag(
        records, SuggestRequest.ranking(DEPTH))]
    console.log(f"suggested for {len(records)} records in {time.perf_counter() - start:.1f} s "
                f"(one pass, limit {DEPTH})")
    return ScoredHits.build([set(r.subjects) for r in records],
                            [[(s.id, s.score) for s in row] for row in rows], DEPTH)


def _grid_table(title: str, grid: GridResult) -> Table:
    table = Table(title=title, title_justify="left")
    for name in ("metric", "limit", "threshold", "precision", "recall", "F1"):
        table.add_column(name, justify="left" if name == "metric" else "right")
    for metric in METRICS:
        p = grid.best(metric)
        table.add_row(f"best {metric}", str(p.limit), f"{p.threshold:.2f}",
                      f"{p.precision:.4f}", f"{p.recall:.4f}", f"{p.f1:.4f}")
    for i, p in enumerate(grid.pareto()):
        table.add_row("Pareto front" if i == 0 else "", str(p.limit), f"{p.threshold:.2f}",
                      f"{p.precision:.4f}", f"{p.recall:.4f}", f"{p.f1:.4f}")
    return table


@app.command(short_help="Find the best limit and threshold on dev records (Annif's optimize).")
def optimize(
    project_dir: Path = typer.Argument(..., help="A trained project folder."),
    input: Path = typer.Option(..., "--input", "-i", help="Records with gold subjects (dev)."),
    metric: str = typer.Option("f1", "--metric", help="What the saved point maximises: f1, precision or recall (doc-averaged)."),
    per_language: bool = typer.Option(False, "--per-language", help="One grid per record language (de, en)."),
    save: bool = typer.Option(False, "--save", help="Save the best limit/threshold into the project: `suggest` and both REST APIs use them when a request gives none."),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG of precision against recall (grid, Pareto front)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Find the best limit (1–15) and threshold (0.00–0.95 by 0.05), as Annif's optimize:
    one suggest pass at limit 15, then every grid point scored on arrays; prints the best
    point per metric and the Pareto front of precision against recall.

    Example: tagalign optimize gnd-hybrid --input dev.jsonl.gz --per-language --save
    """
    if metric not in METRICS:
        refuse(f"--metric {metric!r}: choose one of {', '.join(METRICS)}")
    if plot is not None:  # an extra: say so before the suggest pass, not after it
        MissingExtraError.check("matplotlib", "tagalign optimize --plot", "plot")
    project = load_trained(project_dir)
    records = [r for r in load_records(input, vocab=project.vocab) if r.subjects]
    if not records:
        refuse(f"no record in {input} has gold subjects: nothing to optimise on")
    sh = _scored(project, records)
    groups: dict[str | None, np.ndarray] = {None: np.arange(len(records))}
    if per_language:
        langs = np.array(record_languages(records))
        groups = {lang: np.flatnonzero(langs == lang) for lang in sorted(set(langs))}
    results = {}
    for lang, rows in groups.items():
        grid = grid_search(sh.subset(rows))
        results[lang] = grid
        if not as_json:
            out.print(_grid_table(f"{lang or 'all'} ({len(rows)} records)", grid))
    if as_json:
        typer.echo(json.dumps({lang or "all": {
            "n": g.n, "best": {m: g.best(m).to_json() for m in METRICS},
            "pareto": [p.to_json() for p in g.pareto()]} for lang, g in results.items()},
            indent=1))
    if plot is not None:
        grid = results.get(None) or grid_search(sh)
        plot_pareto(grid, plot, f"{project.path.name}: {len(records)} records")
        console.log(f"plot written to {plot}")
    if save:
        for lang, grid in results.items():
            best = grid.best(metric)
            project.set_defaults(best.limit, best.threshold, language=lang)
            console.log(f"saved {'for ' + lang + ': ' if lang else ''}limit {best.limit}, "
                        f"threshold {best.threshold:.2f} (best {metric} {getattr(best, metric):.4f})")


@app.command(short_help="Tune the suggest-time parameters with Optuna (Annif's hyperopt).")
def hyperopt(
    project_dir: Path = typer.Argument(..., help="A trained project folder."),
    input: Path = typer.Option(..., "--input", "-i", help="Records with gold subjects (dev)."),
    trials: int = typer.Option(20, "--trials", "-T", min=1, help="Trials the study should hold (a resumed study runs only the missing ones)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Trials run in parallel (threads)."),
    metric: str = typer.Option("avg_recall", "--metric", help="avg_recall (the task's avg R@5..20), f1@5 or ndcg."),
    results_file: Path = typer.Option(None, "--results-file", "-r", help="Write every trial (TSV: number, value, parameters)."),
    storage: str = typer.Option(None, "--storage", help="Optuna storage, e.g. sqlite:///study.db: an interrupted study continues."),
    study_name: str = typer.Option(None, "--study-name", help="Name in --storage (default: project name and metric)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the TPE sampler."),
    save: bool = typer.Option(False, "--save", help="Save the best parameters into the project (the model uses them at once)."),
) -> None:
    """Tune the recipe's suggest-time parameters (no retraining) with Optuna's TPE, as
    Annif's hyperopt; the recipe declares them (the hybrid: candidates per source and the
    prior/support weights of the fused score). Trial 0 is the current parameters.

    Example: tagalign hyperopt gnd-hybrid --input dev.jsonl.gz --trials 20 --storage sqlite:///study.db --save
    """
    # imports optuna (the tune extra): only when tuning
    from tagalign.evaluate.hyperopt import plan_study, run_study

    project = load_trained(project_dir)
    plan = plan_study(project.trained_recipe(), load_records(input, vocab=project.vocab), metric,
                      where=input)
    space = plan.space
    console.log("search space: " + ", ".join(f"{k} {lo}–{hi} ({kind})"
                                               for k, (lo, hi, kind) in space.items()))

    def on_trial(trial, best: float) -> None:
        console.log(f"trial {trial.number}: {metric} {trial.value:.4f} (best {best:.4f})")

    start = time.perf_counter()
    result = run_study(plan, trials=trials, jobs=jobs, storage=storage,
                       study_name=study_name or f"{project.path.name}-{metric}", seed=seed,
                       on_trial=on_trial)
    out.print(f"{len(result.seconds)} trials run in {time.perf_counter() - start:.1f} s "
              f"(preparation included): "
              f"{np.mean(result.seconds) if result.seconds else 0:.2f} s per trial")
    if result.baseline is not None:
        out.print(f"current parameters: {metric} {result.baseline:.4f}")
    out.print(f"best trial #{result.study.best_trial.number}: {metric} "
                  f"{result.best_value:.4f}")
    typer.echo(json.dumps(result.best_params, indent=1))
    if results_file is not None:
        with atomic_text(results_file) as fh:
            fh.write("\t".join(["trial", metric, *space]) + "\n")
            for t in result.study.trials:
                if t.value is not None:
                    fh.write("\t".join([str(t.number), f"{t.value:.6f}",
                                        *(str(t.params.get(k, "")) for k in space)]) + "\n")
        console.log(f"trials written to {results_file}")
    if save:
        project.set_params(result.best_params)
        console.log(f"saved into {project.path}: the model now uses them")
