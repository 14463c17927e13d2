"""`tagalign eval`: score predictions with the shared task's metrics, and Annif's."""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from tagalign.cli.app import app, console, must_exist, refuse
from tagalign.cli.common import gold_kind, iter_records, load_records
from tagalign.cli.report import print_summary
from tagalign.errors import MissingExtraError
from tagalign.evaluate import SubjectEvaluator, check_ks, report_tables
from tagalign.evaluate.frequency import COMMON_MIN, frequency_report, subject_counts
from tagalign.evaluate.quality import format_quality, plot_quality, quality_report
from tagalign.evaluate.selection import ScoredHits, selection_metrics, subject_results
from tagalign.io import atomic_text, write_json_atomic
from tagalign.predictions import (
    read_estimates,
    read_scored_predictions,
    read_submission,
    write_submission,
)
from tagalign.project import Project, ProjectConfig
from tagalign.records import InputReport, Record
from tagalign.records.marc.provenance import Provenance
from tagalign.vocab import Vocabulary


def _parse_ks(raw: str) -> list[int]:
    try:
        return check_ks(int(k) for k in raw.split(",") if k.strip())
    except ValueError:  # not integers (int), or not positive (check_ks): one wording
        refuse(f"--ks {raw!r}: expected positive integers like 5,10,15,20")


@app.command("eval", short_help="Score predictions against gold subjects: P@k, R@k, F1@k, nDCG@k …")
def eval_(
    gold: Path = typer.Argument(..., help="Records with gold subjects: JSONL(.gz), JSON-LD folder, Annif TSV, MARC 21 or MARC-XML."),
    pred: Path = typer.Argument(..., help="Predictions JSONL(.gz), one {\"id\", \"subjects\": [...]} per line, best first; or a submission folder {Type}/{lang}/{id}.json."),
    ks: str = typer.Option("5,10,15,20", "--ks", help="Cut-offs k, comma-separated."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (ks, overall, by_language, by_type, by_type_language, missing_predictions; by_frequency with --by-frequency)."),
    submission_dir: Path = typer.Option(None, "--submission-dir", help="Also write the task's submission layout: {Type}/{lang}/{id}.json per gold record."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line instead of skipping it."),
    project_dir: Path = typer.Option(None, "--project", help="Take the limit/threshold of Annif's metrics from this project (saved by `tagalign optimize --save`, per language too) and subject labels for --results-file."),
    limit: int = typer.Option(None, "--limit", min=1, help="Annif's metrics: subjects kept per record (default: --project's, else all predicted)."),
    threshold: float = typer.Option(None, "--threshold", min=0.0, max=1.0, help="Annif's metrics: drop scores below this (default: --project's, else 0)."),
    metrics_file: Path = typer.Option(None, "--metrics-file", "-M", help="Write Annif's metrics (and the task's overall ones under \"task\") as JSON."),
    results_file: Path = typer.Option(None, "--results-file", "-r", help="Write per-subject results (TSV: support, TP, FP, FN, precision, recall, F1)."),
    quality: bool = typer.Option(False, "--quality", help="Also judge the predictions' per-record quality estimates (\"quality\": {\"recall\": ...}): Spearman/Pearson with true recall, calibration by decile, release curve (P/R/F1@5 of the top share of records by estimate)."),
    plot: Path = typer.Option(None, "--plot", help="With --quality: calibration and release curve as a PNG."),
    subjects: str = typer.Option("intellectual", "--subjects", help="MARC gold: which subjects count, by the 883 linked to them: intellectual (chosen by a person, or no 883 says otherwise), confirmed (also machine suggestions a librarian accepted) or machine (every subject, the machine's too)."),
    machine_subjects: bool = typer.Option(False, "--include-machine-subjects", hidden=True, help="Old name of --subjects machine."),
    by_frequency: list[Path] = typer.Option(None, "--by-frequency", metavar="TRAIN", help="Also score by how many of these training records carry each gold subject (repeat for several files; any record format): unseen (0), rare (1 to --common-min − 1), common; per bucket, overall and by language: share of gold, micro recall@k, gold subjects and records."),
    common_min: int = typer.Option(COMMON_MIN, "--common-min", min=2, help="With --by-frequency: the training records from which a subject is common (rare: 1 to this − 1)."),
) -> None:
    """Score predictions with the shared task's metrics: P@k, R@k, F1@k (of the averaged
    P and R), R-precision@k, nDCG@k, avg recall and avg F1 over the ks; overall and by
    language, record type and both. Records without gold subjects are left out; a record
    without a prediction counts as an empty ranking.

    Example: tagalign eval dev.jsonl.gz pred.jsonl --ks 5,10,15,20 --json

    MARC gold (the subjects people chose; --subjects confirmed or machine for more):
    tagalign eval titles.mrc pred.jsonl

    The long tail (recall of the gold subjects few or no training records carry):
    tagalign eval dev.jsonl.gz pred.jsonl --by-frequency train.jsonl.gz
    """
    gold_as = gold_kind("machine" if machine_subjects else subjects, machine=True)
    cutoffs = _parse_ks(ks)
    must_exist(gold, f"gold records not found: {gold}")
    must_exist(pred, f"predictions not found: {pred}")
    for path in by_frequency or []:
        must_exist(path, f"training records not found: {path}")
    if plot is not None:  # an extra: say so before scoring, not after it
        MissingExtraError.check("matplotlib", "tagalign eval --plot", "plot")
    if (quality or plot) and pred.is_dir():
        refuse("--quality needs a predictions JSONL (a submission folder has no estimates)")
    report = InputReport(strict=strict)
    estimates: dict[str, float | None] = {}
    if quality or plot:  # the same file again, for its estimates (bad lines: once)
        _, estimates = read_estimates(pred, InputReport(stream=io.StringIO(), max_shown=0))
    if pred.is_dir():
        scored: dict[str, list[tuple[str, float | None]]] = {rid: [(sid, None) for sid in ids]
                  for rid, ids in read_submission(pred, report).items()}
    else:
        scored = read_scored_predictions(pred, report)
    predictions = {rid: [sid for sid, _ in row] for rid, row in scored.items()}
    report.records_read = len(predictions)
    print_summary(report)
    records = load_records(gold, strict=strict, description="reading gold records",
                           gold=gold_as)
    start = time.perf_counter()
    evaluator = SubjectEvaluator(records, cutoffs)
    if not len(evaluator):
        refuse(f"no record in {gold} has gold subjects: nothing to score")
    scores = evaluator(predictions)
    console.log(f"scored {len(evaluator)} records in {time.perf_counter() - start:.2f} s")
    if evaluator.no_gold:
        console.log(f"{evaluator.no_gold} records without gold subjects were left out")
    unknown = evaluator.unknown_ids(predictions)
    if unknown:
        console.log(f"[yellow]{unknown} predicted record ids are not in {gold} (ignored)[/]")
    if scores["missing_predictions"]:
        console.log(f"[yellow]{scores['missing_predictions']} records have no prediction "
                    "(scored as empty rankings)[/]")
    if by_frequency:
        counts = _train_counts(by_frequency, strict, gold_as)
        scores["by_frequency"] = frequency_report(records, predictions, counts, cutoffs,
                                                  common_min)
    if submission_dir is not None:
        n = write_submission(submission_dir, records, predictions)
        console.log(f"{n} submission files written under {submission_dir}")
    if quality or plot:
        scores["quality"] = quality_report(records, predictions, estimates)
        if plot is not None:
            plot_quality(scores["quality"], plot, title=f"{pred.name} vs {gold.name}")
            console.log(f"quality plot written to {plot}")
    config = _project_config(project_dir)
    gold_records = [r for r in records if r.subjects]
    limits, thresholds = _cuts(gold_records, config, limit, threshold)
    sh = ScoredHits.build([set(r.subjects) for r in gold_records],
                          [scored.get(r.id, []) for r in gold_records])
    annif = selection_metrics(sh, limits, thresholds)
    if as_json:
        typer.echo(json.dumps(scores, indent=1))
    else:
        Console().print(report_tables(scores))
        Console().print(_annif_table(annif, limit, threshold, config is not None))
        if "quality" in scores:
            typer.echo("\n" + format_quality(scores["quality"]))
    if metrics_file is not None:
        write_json_atomic(metrics_file, {**annif, "task": scores["overall"]})
        console.log(f"metrics written to {metrics_file}")
    if results_file is not None:
        vocab = Vocabulary.load(project_dir) if project_dir is not None else None
        _write_results(results_file, subject_results(sh, limits, thresholds), vocab)
        console.log(f"per-subject results written to {results_file}")


def _train_counts(paths: list[Path], strict: bool, gold: Provenance) -> Counter[str]:
    """How many records of the training files carry each subject, the subjects read as
    `tagalign train` reads them (machine-made ones never train: intellectual instead)."""
    kind = Provenance.INTELLECTUAL if gold == Provenance.MACHINE else gold
    counts: Counter[str] = Counter()
    for path in paths:
        counts += subject_counts(iter_records(path, strict=strict, gold=kind))
    return counts


def _project_config(project_dir: Path | None) -> ProjectConfig | None:
    if project_dir is None:
        return None
    return Project.read_config(project_dir)


def _cuts(records: list[Record], config: ProjectConfig | None, limit: int | None,
          threshold: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per record: the limit/threshold given, else the project's for its language, else
    no cut (every predicted subject) and 0."""
    saved = [config.defaults(r.language) if config is not None else
             (np.iinfo(np.int32).max, 0.0) for r in records]
    limits = np.array([limit if limit is not None else n for n, _ in saved], np.int64)
    thresholds = np.array([threshold if threshold is not None else t for _, t in saved])
    return limits, thresholds


def _annif_table(metrics: dict, limit: int | None, threshold: float | None,
                 from_project: bool) -> Table:
    how = "the project's limit/threshold" if from_project else "no limit" if limit is None \
        else f"limit {limit}"
    if threshold is not None:
        how += f", threshold {threshold:.2f}"
    table = Table(title=f"Annif's metrics ({how})", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, str(value) if isinstance(value, int) else f"{value:.4f}")
    return table


def _write_results(path: Path, rows: list[dict], vocab: Vocabulary | None) -> None:
    cols = ["support", "true_positives", "false_positives", "false_negatives", "precision",
            "recall", "f1"]
    with atomic_text(path) as fh:
        fh.write("\t".join(["subject", "label", *cols]) + "\n")
        for row in rows:
            sid = row["subject"]
            label = vocab.label(sid, None) if vocab is not None and sid in vocab else ""
            fh.write("\t".join([sid, label, *(f"{row[c]:.4f}" if isinstance(row[c], float)
                                              else str(row[c]) for c in cols)]) + "\n")
