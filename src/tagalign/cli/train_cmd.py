"""`tagalign train` and `tagalign suggest`."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from tagalign.cli.app import app, console, fail
from tagalign.cli.common import MMAP_HELP, load_records, parse_params
from tagalign.project import DEFAULT_RECIPE, Project, ProjectError
from tagalign.records import InputReport, Record
from tagalign.runtime import set_threads
from tagalign.train.recipes import recipe_names
from tagalign.vocab import VocabularyMismatchError, load_vocabulary


def _feedback_records(project: Project) -> list[Record]:
    """Records librarians confirmed through `tagalign serve` (none if no store exists)."""
    try:
        from tagalign.serve.feedback import FeedbackStore
    except ImportError:
        return []
    if not (project.path / "feedback.sqlite").exists():
        return []
    return list(FeedbackStore.for_project(project.path).confirmed_records(project.path.name))


@app.command()
def train(
    project_dir: Path = typer.Argument(..., help="Project folder (created if missing)."),
    vocab: Path = typer.Option(None, "--vocab", "-v",
                               help="Vocabulary (any supported format); needed for a new project."),
    train_src: Path = typer.Option(..., "--train", "-t", help="Training records (JSONL, JSON-LD dir, TSV)."),
    dev: Path = typer.Option(None, "--dev", "-d", help="Dev records: scored after training."),
    recipe: str = typer.Option(DEFAULT_RECIPE, "--recipe", "-r",
                               help=f"One of: {', '.join(recipe_names())}."),
    param: list[str] = typer.Option(None, "--param", "-p", help="Recipe parameter key=value (JSON values)."),
    config: Path = typer.Option(None, "--config", help="JSON file of recipe parameters."),
    limit_train: int = typer.Option(None, "--limit-train", help="Use only the first N training records."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Reuse finished phases of an interrupted run."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a project with another recipe/params."),
    feedback: bool = typer.Option(True, "--feedback/--no-feedback",
                                  help="Add records librarians confirmed via `tagalign serve`."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed record."),
    threads: int = typer.Option(0, "--threads", help="CPU threads for torch/faiss/omikuji (0 = all)."),
) -> None:
    """Train a project's recipe on records.

    Example: tagalign train gnd-hybrid --vocab gnd-subjects.tsv.gz --train train.jsonl.gz --dev dev.jsonl.gz
    """
    set_threads(threads)  # 0 leaves the defaults
    params = parse_params(param, config)
    try:
        if (project_dir / "project.json").exists() and not overwrite and vocab is None:
            project = Project.load(project_dir)
        else:
            if vocab is None:
                fail("--vocab is needed to create a new project")
            t0 = time.perf_counter()
            voc = load_vocabulary(vocab, report=InputReport(strict=strict))
            console.log(f"vocabulary: {len(voc)} subjects in {time.perf_counter() - t0:.1f} s")
            project = Project.create(project_dir, voc, recipe, params, overwrite=overwrite)
    except (ProjectError, VocabularyMismatchError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    records = load_records(train_src, vocab=project.vocab, strict=strict, limit=limit_train,
                           description="training records")
    if feedback:
        extra = _feedback_records(project)
        if extra:
            console.log(f"+ {len(extra)} records confirmed by librarians")
            records += extra
    dev_records = load_records(dev, vocab=project.vocab, strict=strict,
                               description="dev records") if dev else None
    t0 = time.perf_counter()
    try:
        project.train(records, dev=dev_records, resume=resume)
    except ValueError as exc:
        fail(str(exc))
    console.log(f"[bold green]trained[/] {project.config['recipe']} in "
                f"{time.perf_counter() - t0:.0f} s → {project_dir}")
    if dev_records:
        from tagalign.evaluate import evaluate, print_report

        preds = project.suggest(dev_records, limit=20)
        scores = evaluate(dev_records, {r.id: [s.id for s in row]
                                        for r, row in zip(dev_records, preds, strict=True)})
        project.set_scores(scores["overall"])
        print_report(scores)


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
    address: str = typer.Option(None, "--address", help="Ray cluster: auto or ray://host:10001 "
                                "(default: $RAY_ADDRESS, else Ray started here)."),
    num_workers: int = typer.Option(None, "--num-workers", min=1,
                                    help="Ray workers, each loads the project once (default: CPUs)."),
    output_format: str = typer.Option("jsonl", "--format",
                                      help="Shard format of --engine ray: jsonl or parquet."),
    shard_size: int = typer.Option(5000, "--shard-size", min=1,
                                   help="Records per shard of --engine ray (the unit of resuming)."),
    mmap: bool = typer.Option(False, "--mmap", help=MMAP_HELP + " With --engine ray the "
                              "workers on one machine share the mapped pages."),
) -> None:
    """Suggest subjects for records (a file, or one --title/--abstract).

    Example: tagalign suggest gnd-hybrid --input dev.jsonl.gz --output pred.jsonl --limit 20

    Predictions are written to pred.jsonl.partial as they are made and renamed to pred.jsonl
    at the end; after a failure or Ctrl-C, the same command with --resume tags only the
    records not yet written. Malformed records are named (path:line) and skipped.

    On Ray: tagalign suggest gnd-hybrid --input records/ --output pred/ --engine ray --num-workers 2
    """
    if engine not in ("local", "ray") or output_format not in ("jsonl", "parquet"):
        fail("--engine takes local or ray; --format takes jsonl or parquet")
    if engine == "ray" or output_format == "parquet":
        if input is None or output is None:
            fail("--engine ray/--format parquet need --input and --output (a folder)")
        from tagalign.cli.batch_cmd import suggest_sharded

        return suggest_sharded(project_dir, input, output, limit=limit, threshold=threshold,
                               batch_size=batch_size, engine=engine, address=address,
                               num_workers=num_workers, output_format=output_format,
                               shard_size=shard_size, mmap=mmap)
    from tagalign.cli.suggest_cmd import load_trained, suggest_file, suggest_one

    project = load_trained(project_dir, mmap=mmap)
    if title is not None:
        rec = Record(id="cli", title=title, abstract=abstract, language=language)
        return suggest_one(project, rec, limit, threshold)
    if input is None or output is None:
        fail("give --input and --output (or --title for a single record)")
    suggest_file(project, input, output, limit=limit, threshold=threshold,
                 batch_size=batch_size, strict=strict, resume=resume)
