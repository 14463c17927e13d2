"""`tagalign eval`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tagalign.cli.app import app, console, fail
from tagalign.cli.common import iter_records
from tagalign.evaluate import evaluate, print_report, read_predictions, write_submission
from tagalign.records import BadInputError, InputReport


@app.command("eval")
def eval_(
    gold: Path = typer.Argument(..., help="Records with gold subjects (JSONL, JSON-LD dir, TSV)."),
    pred: Path = typer.Argument(..., help="Predictions JSONL: {\"id\", \"subjects\": [...]} per line."),
    ks: str = typer.Option("5,10,15,20", "--ks", help="Cut-offs, comma-separated."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    submission_dir: Path = typer.Option(None, "--submission-dir",
                                        help="Also write {Type}/{lang}/{id}.json per record."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line."),
) -> None:
    """Score predictions with the shared task's metrics (P@k, R@k, F1@k, avg recall).

    Example: tagalign eval dev.jsonl.gz pred.jsonl --ks 5,10,15,20 --json
    """
    try:
        cutoffs = [int(k) for k in ks.split(",") if k.strip()]
        if not cutoffs or min(cutoffs) < 1:
            raise ValueError
    except ValueError:
        fail(f"--ks {ks!r}: expected positive integers like 5,10,15,20")
    if not pred.exists():
        fail(f"predictions not found: {pred}")
    try:
        predictions = read_predictions(pred, InputReport(strict=strict))
    except BadInputError as exc:
        fail(str(exc))
    records = list(iter_records(gold, strict=strict))
    report = evaluate(records, predictions, cutoffs)
    if submission_dir is not None:
        n = write_submission(submission_dir, records, predictions)
        console.log(f"{n} submission files written under {submission_dir}")
    no_gold = report.pop("no_gold")
    if no_gold:
        console.log(f"{no_gold} records without gold subjects were left out")
    if as_json:
        typer.echo(json.dumps(report, indent=1))
    else:
        print_report(report)
