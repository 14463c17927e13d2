"""`tagalign suggest`: tag a record file (predictions stream to ``OUT.partial`` as they are
made, so bad input or a failed/interrupted run never loses finished records; `--resume`
continues), one record given on the command line, or a folder of shards on Ray."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from tagalign.batch import DEFAULT_MAX_ERRORS
from tagalign.cli.app import app, console, fail, must_exist, out, refuse, skip_teardown
from tagalign.cli.common import (
    ADDRESS_HELP,
    COMPILE_HELP,
    MAX_ERRORS_HELP,
    MMAP_HELP,
    SHARD_HELP,
    log_shards,
    make_runtime,
    progress,
)
from tagalign.predictions import TagCounts
from tagalign.project import Project, Tagger
from tagalign.project.jobs import DEFAULT_JOBS
from tagalign.records import Record
from tagalign.runtime import DEFAULT_LIMIT, Runtime
from tagalign.suggest import LIMIT, THRESHOLD, Bound, SuggestRequest
from tagalign.vocab.rules import read_id_file
from tagalign.workflows.tagging import (
    TagFileOptions,
    TagFileProgress,
    TaggedFile,
    TaggingInterrupted,
    TaggingStopped,
    load_trained,
    tag_file,
)

MAX_WARNINGS_SHOWN = 10


def within(bound: Bound) -> Callable[[float | None], float | None]:
    """An option's check against a request bound: its one message, as every channel's."""
    def check(value: float | None) -> float | None:
        if value is not None and not bound.holds(value):
            raise typer.BadParameter(bound.message)
        return value
    return check


@app.command()
def suggest(
    project_dir: Path = typer.Argument(..., help="A trained project folder."),
    input: Path = typer.Option(None, "--input", "-i", help="Records to tag (JSONL, JSON-LD dir, TSV, MARC: .mrc or MARC-XML, told by content)."),
    output: Path = typer.Option(None, "--output", "-o", help="Predictions: JSONL, or MARC by --format or the name (.mrc, .xml); .gz ok."),
    title: str = typer.Option(None, "--title", help="Tag one record given on the command line."),
    abstract: str = typer.Option("", "--abstract", help="Abstract of the --title record."),
    language: str = typer.Option(None, "--language", "-l", help="de or en (guessed if omitted)."),
    limit: int = typer.Option(None, "--limit", "-n", callback=within(LIMIT), help=f"Subjects per record, {LIMIT.span} (default: the project's, saved by `tagalign optimize --save`, else {DEFAULT_LIMIT})."),
    threshold: float = typer.Option(None, "--threshold", callback=within(THRESHOLD), help=f"Drop suggestions scoring below this, {THRESHOLD.span} (default: the project's, else 0)."),
    batch_size: int = typer.Option(512, "--batch-size", min=1, help="Records per batch."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed record (exit status 1)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run: keep what OUT.partial holds, tag the rest."),
    engine: str = typer.Option("local", "--engine",
                               help="local, or ray: Ray Data workers, --output is a folder of "
                               "shards + manifest.json (resumable; pip install 'tagalign\\[ray]')."),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
    num_workers: int = typer.Option(None, "--num-workers", min=1,
                                    help="Ray workers, each loads the project once (default: CPUs)."),
    output_format: str = typer.Option(None, "--format",
                                      help="Output: jsonl, marc (binary MARC 21) or marcxml "
                                      "(default: by --output's name: .mrc/.marc, .xml, else "
                                      "jsonl); shards of --engine ray: jsonl or parquet."),
    merge: bool = typer.Option(False, "--merge", help="MARC in and out: write each input record whole, with the suggested 650/883 fields added (its own fields untouched)."),
    agency: str = typer.Option(None, "--agency", help="MARC output: the agency in 883 $q (default: the record's 003, else tagalign)."),
    shard_size: int = typer.Option(None, "--shard-size", min=1, help=SHARD_HELP),
    max_errors: float = typer.Option(DEFAULT_MAX_ERRORS, "--max-errors", min=0.0, max=1.0, help=MAX_ERRORS_HELP),
    mmap: bool = typer.Option(False, "--mmap", help=MMAP_HELP + " With --engine ray the "
                              "workers on one machine share the mapped pages."),
    release_above: float = typer.Option(
        None, "--release-above", min=0.0, max=1.0,
        help="Write only records whose estimated recall is at least this to --output; the "
             "rest (lower, or no estimate) go to --review."),
    review: Path = typer.Option(None, "--review", help="Review file of --release-above "
                                "(default: OUTPUT with .review before the suffix)."),
    exclude_file: Path = typer.Option(None, "--exclude", help="File of subject ids or GND URIs (one a line) never to suggest; the limit is filled from the others."),
    threads: int = typer.Option(0, "--threads", min=0, help="CPU threads for the models (0 = all), shared out among the --jobs."),
    jobs: int = typer.Option(DEFAULT_JOBS, "--jobs", "-j", min=0, help="Processes tagging a file side by side, forked after the model loads, so they share it (0 = one per core; 1 = this process alone)."),
    compile_ranker: bool = typer.Option(True, "--compile-ranker/--no-compile-ranker", help=COMPILE_HELP),
    domains: Path = typer.Option(None, "--domains", help="A domain model trained on this project (`tagalign classify train --subjects-project`): each line gets \"domains\": [{\"label\", \"score\"}] (a Parquet column of --engine ray; MARC: 084 fields), from the same pass's suggestions."),
) -> None:
    """Suggest subjects for records (a file, or one --title/--abstract).

    Example: tagalign suggest gnd-hybrid --input dev.jsonl.gz --output pred.jsonl --limit 20

    Predictions are written to pred.jsonl.partial as they are made and renamed to pred.jsonl
    at the end; after a failure or Ctrl-C, the same command with --resume tags only the
    records not yet written. Malformed records are named (path:line) and skipped.

    Each line carries "quality": {"recall", "precision"}, the estimated quality of the
    record's list, when the recipe has an estimator (the hybrid). With --release-above 0.6
    the records estimated at recall ≥ 0.6 go to pred.jsonl, the rest to pred.review.jsonl.

    On Ray: tagalign suggest gnd-hybrid --input records/ --output pred/ --engine ray --num-workers 2

    Never these subjects: tagalign suggest gnd-hybrid --title "…" --exclude excluded-ids.txt

    Domains beside the subjects: tagalign suggest gnd-hybrid --input dev.jsonl.gz --output
    pred.jsonl --domains domains-stack

    MARC in, MARC out (650/883 as DNB writes machine subjects; --merge: the input records
    whole, with these fields added): tagalign suggest gnd-hybrid --input titles.mrc
    --output suggested.xml --format marcxml --merge --agency DE-101
    """
    exclude = read_exclude(exclude_file)
    options = TagFileOptions(
        format=output_format, engine=engine, resume=resume, strict=strict,
        batch_size=batch_size, jobs=jobs, merge=merge, agency=agency,
        release_above=release_above, review=review, domains=domains, mmap=mmap,
        address=address, num_workers=num_workers, shard_size=shard_size,
        max_errors=max_errors)
    request = SuggestRequest(limit=limit, threshold=threshold, exclude=exclude)
    if options.sharded:
        if input is None or output is None:
            refuse("--engine ray/--format parquet need --input and --output (a folder)")
        # not applied to this process: the workers tag
        runtime = Runtime(threads=threads, compile_ranker=compile_ranker)
        return report(run(project_dir, input, output, request, options, runtime, engine))
    if title is None:
        if input is None or output is None:
            refuse("give --input and --output (or --title for a single record)")
        runtime = make_runtime(threads, compile_ranker)
        return report(run(project_dir, input, output, request, options, runtime, engine),
                      release_above)
    if domains is not None:
        must_exist(domains, f"domain model not found: {domains}")
    options.output_format(output, input)
    project = load_trained(project_dir, mmap=mmap,
                           runtime=make_runtime(threads, compile_ranker))
    if domains is not None:
        from tagalign.project.domains import attach

        project = attach(project, domains)
        request = replace(request, domains=True)
    suggest_one(project, Record(id="cli", title=title, abstract=abstract, language=language),
                request)


def read_exclude(path: Path | None) -> frozenset[str]:
    return frozenset() if path is None else frozenset(read_id_file(path, "--exclude"))


def suggest_one(project: Project, rec: Record, request: SuggestRequest) -> None:
    tagged = Tagger(project).tag([rec], request)[0]
    if tagged.warning:
        console.print(f"[yellow]warning:[/] {tagged.warning}")
    if tagged.suggestions:
        print_suggestions(tagged.suggestions)
    if tagged.domains:
        out.print("domains: " + ", ".join(f"{lab} ({score:.2f})"
                                          for lab, score in tagged.domains))
    if tagged.quality is not None:  # part of the result: stdout, beside the table
        out.print(f"estimated quality: recall {tagged.quality.recall:.2f}, "
                  f"precision {tagged.quality.precision:.2f}")


def run(project_dir: Path, input: Path, output: Path, request: SuggestRequest,
        options: TagFileOptions, runtime: Runtime, engine: str) -> TaggedFile:
    """`tag_file` with a progress bar; a run that stopped prints its summary line before its
    error (exit status 1, or 130 on Ctrl-C). A finished run has closed its outputs: the
    command may then end without the interpreter's teardown (`skip_teardown`; ≈ 7 s of
    freeing a 1.5M-heading model object by object)."""
    try:
        done = tag_file(project_dir, input, output, request, options, runtime=runtime,
                        progress=ProgressBar(f"suggest ({engine})"))
    except (TaggingStopped, TaggingInterrupted) as exc:
        if exc.result.batch is not None:
            report(exc.result)
        else:
            console.print(exc.result.summary, soft_wrap=True)
        if isinstance(exc, TaggingInterrupted):
            fail(escape(str(exc)), code=130)
        raise
    skip_teardown()
    return done


def report(done: TaggedFile, release_above: float | None = None) -> None:
    """What a finished (or, sharded, stopped) run did, on stderr."""
    if done.batch is not None:
        log_shards(done.batch, done.output, done.planned_workers)
        return
    console.print(done.summary, soft_wrap=True)
    if done.review is not None:
        console.log(f"{done.counts.released} records with estimated recall ≥ "
                    f"{release_above} written to {done.output}, {done.counts.review} to "
                    f"review in {done.review}")
    else:
        console.log(f"predictions written to {done.output}")


class ProgressBar(TagFileProgress):
    """`tag_file`'s progress as a rich bar: records tagged and their rate (a local run), or
    records of the planned shards (a sharded one); the first warnings and a resumed run's
    start as log lines."""

    def __init__(self, sharded_name: str) -> None:
        self.sharded_name = sharded_name
        self.shown = 0
        self.t0 = time.perf_counter()
        self.done = self.base = 0

    def start(self, sharded: bool) -> None:
        self.t0 = time.perf_counter()
        self.bar = progress()
        self.bar.start()
        # a sharded run's bar is shown once the input is planned, so an error before that
        # is one clean line
        self.task = self.bar.add_task(self.sharded_name if sharded else "suggesting",
                                      total=None, rate="", visible=not sharded)

    def stop(self) -> None:
        self.bar.stop()

    def resumed(self, already: int, partial: Path) -> None:
        console.log(f"resuming: {already} records already in {partial}")

    def batch(self, counts: TagCounts) -> None:
        rate = counts.tagged / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.update(self.task, completed=counts.tagged, rate=f"{rate:.0f} rec/s")

    def warning(self, record_id: str, warning: str) -> None:
        self.shown += 1
        if self.shown <= MAX_WARNINGS_SHOWN:
            console.print(f"[yellow]warning:[/] record {record_id}: {warning}",
                          soft_wrap=True)

    def planned(self, total: int, already: int) -> None:
        self.done = self.base = already
        self.bar.update(self.task, total=total, completed=already, visible=True)

    def shard(self, summary: dict[str, Any]) -> None:
        self.done += summary["records_in"]
        rate = (self.done - self.base) / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.update(self.task, completed=self.done, rate=f"{rate:.0f} rec/s")


def print_suggestions(rows) -> None:
    table = Table("#", "subject", "label", "score", "reasons")
    for i, s in enumerate(rows, 1):
        why = ", ".join(s.reasons.get("sources", []))
        if "label_match" in s.reasons:
            why += f"; label '{s.reasons['label_match']}'"
        if s.reasons.get("neighbours"):
            why += f"; {len(s.reasons['neighbours'])} similar records"
        table.add_row(str(i), s.id, s.label, f"{s.score:.3f}", why)
    out.print(table)
