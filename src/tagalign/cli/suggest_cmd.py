"""`tagalign suggest`: tag a record file (predictions stream to ``OUT.partial`` as they are
made, so bad input or a failed/interrupted run never loses finished records; `--resume`
continues), one record given on the command line, or a folder of shards on Ray."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from tagalign.batch import DEFAULT_MAX_ERRORS
from tagalign.cli.app import app, console, fail, must_exist, out, refuse
from tagalign.cli.common import (
    ADDRESS_HELP,
    COMPILE_HELP,
    MAX_ERRORS_HELP,
    MMAP_HELP,
    SHARD_HELP,
    make_runtime,
    progress,
    run_sharded,
)
from tagalign.predictions import (
    PartialExistsError,
    PredictionStream,
    TagCounts,
    open_prediction_stream,
    output_format,
    review_path,
    tag_records,
)
from tagalign.project import Project, Tagger
from tagalign.project.jobs import DEFAULT_JOBS, TaggingJobs
from tagalign.records import BadInputError, InputReport, Record, read_records
from tagalign.records.loaders import guess_format
from tagalign.records.marc.reader import iter_marc_records
from tagalign.runtime import DEFAULT_LIMIT, Runtime
from tagalign.suggest import SuggestRequest
from tagalign.vocab.rules import read_id_file

MAX_WARNINGS_SHOWN = 10


@app.command()
def suggest(
    project_dir: Path = typer.Argument(..., help="A trained project folder."),
    input: Path = typer.Option(None, "--input", "-i", help="Records to tag (JSONL, JSON-LD dir, TSV, MARC: .mrc or MARC-XML, told by content)."),
    output: Path = typer.Option(None, "--output", "-o", help="Predictions: JSONL, or MARC by --format or the name (.mrc, .xml); .gz ok."),
    title: str = typer.Option(None, "--title", help="Tag one record given on the command line."),
    abstract: str = typer.Option("", "--abstract", help="Abstract of the --title record."),
    language: str = typer.Option(None, "--language", "-l", help="de or en (guessed if omitted)."),
    limit: int = typer.Option(None, "--limit", "-n", min=1, max=1000, help=f"Subjects per record (default: the project's, saved by `tagalign optimize --save`, else {DEFAULT_LIMIT})."),
    threshold: float = typer.Option(None, "--threshold", help="Drop suggestions scoring below this (default: the project's, else 0)."),
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
    if engine not in ("local", "ray") or output_format not in (None, *OUTPUT_FORMATS):
        refuse(f"--engine takes local or ray; --format takes {', '.join(OUTPUT_FORMATS)}")
    if review is not None and release_above is None:
        refuse("--review goes with --release-above")
    if domains is not None:
        must_exist(domains, f"domain model not found: {domains}")
    if engine == "ray" or output_format == "parquet":
        if release_above is not None:
            refuse("--release-above works with --engine local and JSONL output")
        if output_format in ("marc", "marcxml") or merge or agency is not None:
            refuse("MARC output (--format marc/marcxml, --merge, --agency) works with "
                   "--engine local; --engine ray writes jsonl or parquet shards")
        if input is None or output is None:
            refuse("--engine ray/--format parquet need --input and --output (a folder)")
        return suggest_sharded(project_dir, input, output, limit=limit, threshold=threshold,
                               batch_size=batch_size, engine=engine, address=address,
                               num_workers=num_workers, output_format=output_format or "jsonl",
                               shard_size=shard_size, mmap=mmap, exclude=exclude,
                               max_errors=max_errors, compile_ranker=compile_ranker,
                               domains=domains)
    if title is None and (input is None or output is None):
        refuse("give --input and --output (or --title for a single record)")
    if title is None:  # before the seconds of loading the project
        must_exist(input, f"records not found: {input}")
    fmt = output_format_of(output, output_format, merge, agency, input)
    project = load_trained(project_dir, mmap=mmap,
                           runtime=make_runtime(threads, compile_ranker))
    if domains is not None:
        from tagalign.project.domains import attach

        project = attach(project, domains)
    request = SuggestRequest(limit=limit, threshold=threshold, exclude=exclude,
                             domains=project.domain_model is not None)
    if title is not None:
        rec = Record(id="cli", title=title, abstract=abstract, language=language)
        return suggest_one(project, rec, request)
    if release_above is not None and review is None:
        review = review_path(output)
    suggest_file(project, input, output, request,
                 batch_size=batch_size, strict=strict, resume=resume,
                 release_above=release_above, review=review,
                 fmt=fmt, merge=merge, agency=agency, jobs=jobs)


OUTPUT_FORMATS = ("jsonl", "parquet", "marc", "marcxml")


def output_format_of(output: Path | None, given: str | None, merge: bool, agency: str | None,
                     input: Path | None) -> str:
    """The output format of a local run, checked against --merge/--agency."""
    if output is None:
        if merge or agency is not None or given is not None:
            refuse("--format, --merge and --agency go with --output")
        return "jsonl"
    fmt = output_format(output, given)
    if fmt == "jsonl" and (merge or agency is not None):
        refuse("--merge and --agency go with MARC output: --format marc or marcxml, or an "
               "--output named .mrc or .xml")
    if merge and (input is None or input.is_dir() or guess_format(input) != "marc"):
        refuse(f"--merge needs MARC input (binary or MARC-XML); {input} is not")
    return fmt


def read_exclude(path: Path | None) -> frozenset[str]:
    return frozenset() if path is None else frozenset(read_id_file(path, "--exclude"))


def load_trained(project_dir: Path, mmap: bool = False, runtime: Runtime | None = None
                 ) -> Project:
    project = Project.load(project_dir, mmap=mmap, runtime=runtime)
    project.trained_recipe()  # NotTrainedError before any record is read
    return project


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


def suggest_file(project: Project, input: Path, output: Path, request: SuggestRequest, *,
                 batch_size: int, strict: bool, resume: bool,
                 release_above: float | None = None, review: Path | None = None,
                 fmt: str = "jsonl", merge: bool = False, agency: str | None = None,
                 jobs: int = 1) -> None:
    """Tag every record of ``input`` into ``output`` (and ``review``, see `tag_records`)
    as ``request`` asks, as ``fmt`` (JSONL or MARC, `open_prediction_stream`); exit status 1 on a failed run or a
    malformed record under ``strict``, 130 on Ctrl-C, 0 otherwise."""
    must_exist(input, f"records not found: {input}")
    source = input if merge else None
    stream = open_prediction_stream(output, fmt, resume, agency=agency, merge=source)
    side = open_prediction_stream(review, fmt, resume, agency=agency, merge=source) \
        if review is not None else None
    try:
        stream.open()
        if side is not None:
            side.open()
    except PartialExistsError:
        stream.close()
        raise
    counts = TagCounts()
    if stream.done:
        console.log(f"resuming: {len(stream.done)} records already in {stream.partial}")
    report = InputReport(strict=strict)
    try:
        # the jobs are forked first, before the progress bar's thread starts
        with TaggingJobs(Tagger(project), jobs) as tagger:
            _tag_all(tagger, input, stream, report, counts, request, batch_size,
                     side, release_above, merge)
    except BaseException as exc:
        stream.close()
        if side is not None:
            side.close()
        console.print(counts.line(report), soft_wrap=True)
        how = (f"{stream.written + counts.already} finished records are kept in "
               f"{stream.partial}; run the same command with --resume to continue")
        if isinstance(exc, KeyboardInterrupt):
            fail(f"interrupted; {how}", code=130)
        if isinstance(exc, BadInputError):
            fail(f"{exc} (--strict stops here); {how} once the input is fixed")
        if isinstance(exc, SystemExit):
            raise
        fail(f"{type(exc).__name__}: {exc}; {how}")
    stream.commit()
    console.print(counts.line(report), soft_wrap=True)
    if side is not None:
        side.commit()
        console.log(f"{counts.released} records with estimated recall ≥ {release_above} "
                    f"written to {output}, {counts.review} to review in {review}")
    else:
        console.log(f"predictions written to {output}")


def _tag_all(tagger: TaggingJobs, input: Path, stream: PredictionStream, report: InputReport,
             counts: TagCounts, request: SuggestRequest, batch_size: int,
             review: PredictionStream | None = None,
             release_above: float | None = None, merge: bool = False) -> None:
    t0 = time.perf_counter()
    shown = 0

    def warn(rid: str, warning: str) -> None:
        nonlocal shown
        shown += 1
        if shown <= MAX_WARNINGS_SHOWN:
            console.print(f"[yellow]warning:[/] record {rid}: {warning}", soft_wrap=True)

    with progress() as bar:
        task = bar.add_task("suggesting", total=None, rate="")

        def on_batch(c: TagCounts) -> None:
            rate = c.tagged / max(time.perf_counter() - t0, 1e-9)
            bar.update(task, completed=c.tagged, rate=f"{rate:.0f} rec/s")

        # --merge: read by the same decoder that the output stream re-reads the input with
        records = (rec for _, rec in iter_marc_records(input, report)) if merge \
            else read_records(input, report=report)
        tag_records(records, lambda chunk: tagger.submit(chunk, request), stream, counts,
                    batch_size, on_batch=on_batch, on_warning=warn, review=review,
                    release_above=release_above,
                    # with jobs, the next batch is tagged while one is written
                    overlap=tagger.forked)


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


def suggest_sharded(project_dir: Path, input: Path, output: Path, *, limit: int | None,
                    threshold: float | None, batch_size: int, engine: str, address: str | None,
                    num_workers: int | None, output_format: str, shard_size: int | None,
                    mmap: bool = False, exclude: frozenset[str] = frozenset(),
                    max_errors: float = DEFAULT_MAX_ERRORS, compile_ranker: bool = True,
                    domains: Path | None = None) -> None:
    """`tagalign suggest --engine ray` (or ``--format parquet``): a folder of shards.
    ``mmap`` and ``compile_ranker`` are not output settings: a resumed run may change them.
    ``domains``: a domain model each worker loads beside the project (checked here first,
    so a wrong one stops the run before any worker starts)."""
    Project.check_trained_folder(project_dir)
    spec = {"task": "suggest", "project": str(project_dir.resolve()), "limit": limit,
            "threshold": threshold, "format": output_format, "batch_size": batch_size,
            "mmap": mmap, "compile_ranker": compile_ranker}
    if exclude:  # only then: a resumed run of an older spec still matches
        spec["exclude"] = sorted(exclude)
    if domains is not None:  # likewise
        from tagalign.project.domains import DomainModel
        from tagalign.vocab import Vocabulary

        DomainModel.load(domains, Vocabulary.load(project_dir))
        spec["domains"] = str(domains.resolve())
    run_sharded(spec, input.resolve(), output.resolve(), engine=engine, address=address,
                num_workers=num_workers, shard_size=shard_size, max_errors=max_errors)
