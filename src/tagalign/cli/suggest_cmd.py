"""`tagalign suggest`: tag a record file (predictions stream to ``OUT.partial`` as they are
made, so bad input or a failed/interrupted run never loses finished records; `--resume`
continues), one record given on the command line, or a folder of shards on Ray."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from tagalign.cli.app import app, console, fail
from tagalign.cli.common import ADDRESS_HELP, MMAP_HELP, progress, run_sharded
from tagalign.predictions import (
    PartialExistsError,
    PredictionStream,
    TagCounts,
    review_path,
    tag_records,
)
from tagalign.project import Project, ProjectError
from tagalign.records import BadInputError, InputReport, Record, read_records
from tagalign.vocab import VocabularyMismatchError

MAX_WARNINGS_SHOWN = 10


@app.command()
def suggest(
    project_dir: Path = typer.Argument(..., help="A trained project folder."),
    input: Path = typer.Option(None, "--input", "-i", help="Records to tag (JSONL, JSON-LD dir, TSV)."),
    output: Path = typer.Option(None, "--output", "-o", help="Predictions JSONL (.gz ok)."),
    title: str = typer.Option(None, "--title", help="Tag one record given on the command line."),
    abstract: str = typer.Option("", "--abstract", help="Abstract of the --title record."),
    language: str = typer.Option(None, "--language", "-l", help="de or en (guessed if omitted)."),
    limit: int = typer.Option(20, "--limit", "-n", min=1, max=1000, help="Subjects per record."),
    threshold: float = typer.Option(0.0, "--threshold", help="Drop suggestions scoring below this."),
    batch_size: int = typer.Option(512, "--batch-size", min=1, help="Records per batch."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed record (exit status 1)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run: keep what OUT.partial holds, tag the rest."),
    engine: str = typer.Option("local", "--engine",
                               help="local, or ray: Ray Data workers, --output is a folder of "
                               "shards + manifest.json (resumable; pip install 'tagalign[ray]')."),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
    num_workers: int = typer.Option(None, "--num-workers", min=1,
                                    help="Ray workers, each loads the project once (default: CPUs)."),
    output_format: str = typer.Option("jsonl", "--format",
                                      help="Shard format of --engine ray: jsonl or parquet."),
    shard_size: int = typer.Option(5000, "--shard-size", min=1,
                                   help="Records per shard of --engine ray (the unit of resuming)."),
    mmap: bool = typer.Option(False, "--mmap", help=MMAP_HELP + " With --engine ray the "
                              "workers on one machine share the mapped pages."),
    release_above: float = typer.Option(
        None, "--release-above", min=0.0, max=1.0,
        help="Write only records whose estimated recall is at least this to --output; the "
             "rest (lower, or no estimate) go to --review."),
    review: Path = typer.Option(None, "--review", help="Review file of --release-above "
                                "(default: OUTPUT with .review before the suffix)."),
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
    """
    if engine not in ("local", "ray") or output_format not in ("jsonl", "parquet"):
        fail("--engine takes local or ray; --format takes jsonl or parquet")
    if review is not None and release_above is None:
        fail("--review goes with --release-above")
    if engine == "ray" or output_format == "parquet":
        if release_above is not None:
            fail("--release-above works with --engine local and JSONL output")
        if input is None or output is None:
            fail("--engine ray/--format parquet need --input and --output (a folder)")
        return suggest_sharded(project_dir, input, output, limit=limit, threshold=threshold,
                               batch_size=batch_size, engine=engine, address=address,
                               num_workers=num_workers, output_format=output_format,
                               shard_size=shard_size, mmap=mmap)
    project = load_trained(project_dir, mmap=mmap)
    if title is not None:
        rec = Record(id="cli", title=title, abstract=abstract, language=language)
        return suggest_one(project, rec, limit, threshold)
    if input is None or output is None:
        fail("give --input and --output (or --title for a single record)")
    if release_above is not None and review is None:
        review = review_path(output)
    suggest_file(project, input, output, limit=limit, threshold=threshold,
                 batch_size=batch_size, strict=strict, resume=resume,
                 release_above=release_above, review=review)


def load_trained(project_dir: Path, mmap: bool = False) -> Project:
    try:
        project = Project.load(project_dir, mmap=mmap)
        if project.recipe is None:
            raise ProjectError(f"project {project_dir} is not trained yet; run `tagalign train`")
    except (ProjectError, VocabularyMismatchError) as exc:
        fail(str(exc))
        raise  # unreachable: fail() exits
    return project


def suggest_one(project: Project, rec: Record, limit: int, threshold: float) -> None:
    tagged = project.tag([rec], limit, threshold)[0]
    if tagged.warning:
        console.print(f"[yellow]warning:[/] {tagged.warning}")
    if tagged.suggestions:
        print_suggestions(tagged.suggestions)
    if tagged.quality is not None:
        console.print(f"estimated quality: recall {tagged.quality.recall:.2f}, "
                      f"precision {tagged.quality.precision:.2f}")


def suggest_file(project: Project, input: Path, output: Path, *, limit: int, threshold: float,
                 batch_size: int, strict: bool, resume: bool,
                 release_above: float | None = None, review: Path | None = None) -> None:
    """Tag every record of ``input`` into ``output`` (and ``review``, see `tag_records`);
    exit status 1 on a failed run or a malformed record under ``strict``, 130 on Ctrl-C,
    0 otherwise."""
    if not input.exists():
        fail(f"records not found: {input}")
    stream = PredictionStream(output, resume=resume)
    side = PredictionStream(review, resume=resume) if review is not None else None
    try:
        stream.open()
        if side is not None:
            side.open()
    except PartialExistsError as exc:
        stream.close()
        fail(str(exc))
    counts = TagCounts()
    if stream.done:
        console.log(f"resuming: {len(stream.done)} records already in {stream.partial}")
    report = InputReport(strict=strict)
    try:
        _tag_all(project, input, stream, report, counts, limit, threshold, batch_size,
                 side, release_above)
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


def _tag_all(project: Project, input: Path, stream: PredictionStream, report: InputReport,
             counts: TagCounts, limit: int, threshold: float, batch_size: int,
             review: PredictionStream | None = None,
             release_above: float | None = None) -> None:
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

        tag_records(read_records(input, report=report),
                    lambda chunk: project.tag(chunk, limit, threshold),
                    stream, counts, batch_size, on_batch=on_batch, on_warning=warn,
                    review=review, release_above=release_above)


def print_suggestions(rows) -> None:
    table = Table("#", "subject", "label", "score", "reasons")
    for i, s in enumerate(rows, 1):
        why = ", ".join(s.reasons.get("sources", []))
        if "label_match" in s.reasons:
            why += f"; label '{s.reasons['label_match']}'"
        if s.reasons.get("neighbours"):
            why += f"; {len(s.reasons['neighbours'])} similar records"
        table.add_row(str(i), s.id, s.label, f"{s.score:.3f}", why)
    console.print(table)


def suggest_sharded(project_dir: Path, input: Path, output: Path, *, limit: int,
                    threshold: float, batch_size: int, engine: str, address: str | None,
                    num_workers: int | None, output_format: str, shard_size: int,
                    mmap: bool = False) -> None:
    """`tagalign suggest --engine ray` (or ``--format parquet``): a folder of shards.
    ``mmap`` is not an output setting: a resumed run may change it."""
    if not (project_dir / "project.json").exists():
        fail(f"{project_dir} is not a tagalign project (no project.json)")
    if not (project_dir / "model").exists():
        fail(f"project {project_dir} is not trained yet; run `tagalign train`")
    spec = {"task": "suggest", "project": str(project_dir.resolve()), "limit": limit,
            "threshold": threshold, "format": output_format, "batch_size": batch_size,
            "mmap": mmap}
    run_sharded(spec, input.resolve(), output.resolve(), engine=engine, address=address,
                num_workers=num_workers, shard_size=shard_size)
