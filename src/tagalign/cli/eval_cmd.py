"""`tagalign eval`: score predictions with the shared task's metrics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from tagalign.cli.app import app, console, fail
from tagalign.cli.common import load_records
from tagalign.evaluate import SubjectEvaluator, check_ks, print_report
from tagalign.evaluate.quality import format_quality, plot_quality, quality_report
from tagalign.predictions import (
    read_estimates,
    read_predictions,
    read_submission,
    write_submission,
)
from tagalign.records import BadInputError, InputReport


def _parse_ks(raw: str) -> list[int]:
    try:
        return check_ks(int(k) for k in raw.split(",") if k.strip())
    except ValueError:
        fail(f"--ks {raw!r}: expected positive integers like 5,10,15,20")
        raise  # unreachable: fail() exits


@app.command("eval")
def eval_(
    gold: Path = typer.Argument(..., help="Records with gold subjects: JSONL(.gz), JSON-LD folder or Annif TSV."),
    pred: Path = typer.Argument(..., help="Predictions JSONL(.gz), one {\"id\", \"subjects\": [...]} per line, best first; or a submission folder {Type}/{lang}/{id}.json."),
    ks: str = typer.Option("5,10,15,20", "--ks", help="Cut-offs k, comma-separated."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (ks, overall, by_language, by_type, by_type_language, missing_predictions)."),
    submission_dir: Path = typer.Option(None, "--submission-dir", help="Also write the task's submission layout: {Type}/{lang}/{id}.json per gold record."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line instead of skipping it."),
    quality: bool = typer.Option(False, "--quality", help="Also judge the predictions' per-record quality estimates (\"quality\": {\"recall\": ...}): Spearman/Pearson with true recall, calibration by decile, release curve (P/R/F1@5 of the top share of records by estimate)."),
    plot: Path = typer.Option(None, "--plot", help="With --quality: calibration and release curve as a PNG."),
) -> None:
    """Score predictions with the shared task's metrics: P@k, R@k, F1@k (of the averaged
    P and R), R-precision@k, nDCG@k, avg recall and avg F1 over the ks; overall and by
    language, record type and both. Records without gold subjects are left out; a record
    without a prediction counts as an empty ranking.

    Example: tagalign eval dev.jsonl.gz pred.jsonl --ks 5,10,15,20 --json
    """
    cutoffs = _parse_ks(ks)
    if not gold.exists():
        fail(f"gold records not found: {gold}")
    if not pred.exists():
        fail(f"predictions not found: {pred}")
    if (quality or plot) and pred.is_dir():
        fail("--quality needs a predictions JSONL (a submission folder has no estimates)")
    report = InputReport(strict=strict)
    estimates: dict[str, float | None] = {}
    try:
        if quality or plot:
            predictions, estimates = read_estimates(pred, report)
        elif pred.is_dir():
            predictions = read_submission(pred, report)
        else:
            predictions = read_predictions(pred, report)
    except BadInputError as exc:
        fail(str(exc))
    except (OSError, EOFError) as exc:
        fail(f"cannot read predictions {pred}: {exc}")
    report.records_read = len(predictions)
    report.print_summary()
    records = load_records(gold, strict=strict, description="reading gold records")
    start = time.perf_counter()
    evaluator = SubjectEvaluator(records, cutoffs)
    if not len(evaluator):
        fail(f"no record in {gold} has gold subjects: nothing to score")
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
    if submission_dir is not None:
        n = write_submission(submission_dir, records, predictions)
        console.log(f"{n} submission files written under {submission_dir}")
    if quality or plot:
        try:
            scores["quality"] = quality_report(records, predictions, estimates)
        except ValueError as exc:
            fail(f"--quality: {exc}")
        if plot is not None:
            plot_quality(scores["quality"], plot, title=f"{pred.name} vs {gold.name}")
            console.log(f"quality plot written to {plot}")
    if as_json:
        typer.echo(json.dumps(scores, indent=1))
    else:
        print_report(scores)
        if "quality" in scores:
            typer.echo("\n" + format_quality(scores["quality"]))
