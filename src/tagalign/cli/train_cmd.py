"""`tagalign train`."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from tagalign.cli.app import app, console, must_exist, out, refuse, skip_teardown
from tagalign.cli.common import (
    SUBJECTS_HELP,
    gold_kind,
    load_records,
    make_runtime,
    parse_params,
    read_vocabulary,
)
from tagalign.evaluate import report_tables
from tagalign.project import DEFAULT_RECIPE, Project
from tagalign.recipes import get_recipe, recipe_names
from tagalign.records import InputReport
from tagalign.runtime import Runtime


def _from_projects_file(source: Path, project_id: str, overwrite: bool,
                        runtime: Runtime) -> Project:
    from tagalign.projects_file import project_for_training, read_project

    return project_for_training(read_project(source, project_id), overwrite=overwrite,
                                runtime=runtime)


@app.command()
def train(
    project_dir: Path = typer.Argument(..., help="Project folder (created if missing); with --projects, a project id."),
    projects_file: Path = typer.Option(None, "--projects", help="A projects.toml: PROJECT_DIR is one of its ids, whose table gives the folder, vocab, recipe and params."),
    vocab: Path = typer.Option(None, "--vocab", "-v",
                               help="Vocabulary (any supported format); needed for a new project."),
    train_src: Path = typer.Option(..., "--train", "-t", help="Training records (JSONL, JSON-LD dir, TSV, MARC 21 or MARC-XML)."),
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
    feedback_db: str = typer.Option(None, "--feedback-db",
                                    help="SQLAlchemy URL of the feedback store, as given to serve (default: the projects file's feedback_db, else PROJECT/feedback.sqlite)."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed record."),
    subjects: str = typer.Option("intellectual", "--subjects", help=SUBJECTS_HELP),
    machine_subjects: bool = typer.Option(False, "--include-machine-subjects", hidden=True),
    threads: int = typer.Option(0, "--threads", help="CPU threads for torch/faiss/omikuji (0 = all)."),
) -> None:
    """Train a project's recipe on records.

    Example: tagalign train gnd-hybrid --vocab gnd-subjects.tsv.gz --train train.jsonl.gz --dev dev.jsonl.gz

    From a projects file: tagalign train --projects projects.toml gnd-hybrid --train train.jsonl.gz

    From MARC (binary or MARC-XML, gzip or not; only the subjects people chose, with
    --subjects confirmed also the machine suggestions a librarian accepted):
    tagalign train gnd-hybrid --vocab gnd-subjects.tsv.gz --train titles.mrc.gz
    """
    if machine_subjects:  # the flag of old: say why it went rather than "no such option"
        refuse("--include-machine-subjects is gone: machine-made subjects never train a "
               "tagger; --subjects confirmed adds those a librarian accepted")
    gold = gold_kind(subjects)
    runtime = make_runtime(threads, compile_ranker=False)  # training scores no batch
    params = parse_params(param, config)
    # with --projects, PROJECT_DIR is an id: the table names the folder and vocabulary
    if projects_file is None and vocab is None and (
            overwrite or not (project_dir / "project.json").exists()):
        refuse("--vocab is needed to create a new project")
    for what, path in (("training records", train_src), ("dev records", dev)):
        if path is not None:
            must_exist(path, f"{what} not found: {path}")
    new = overwrite or vocab is not None or not (project_dir / "project.json").exists()
    if new and projects_file is None:  # names and values checked before the vocabulary loads
        get_recipe(recipe).check_params(params)
    if projects_file is not None:
        if vocab is not None or param or config is not None:
            refuse("with --projects, the table gives vocab, recipe and params")
        project = _from_projects_file(projects_file, str(project_dir), overwrite, runtime)
        project_dir = project.path
    elif (project_dir / "project.json").exists() and not overwrite and vocab is None:
        project = Project.load(project_dir, runtime=runtime)
    else:
        if vocab is None:
            refuse("--vocab is needed to create a new project")
        t0 = time.perf_counter()
        voc = read_vocabulary(vocab, InputReport(strict=strict))
        console.log(f"vocabulary: {len(voc)} subjects in {time.perf_counter() - t0:.1f} s")
        project = Project.create(project_dir, voc, recipe, params, overwrite=overwrite,
                                 runtime=runtime)
    records = load_records(train_src, vocab=project.vocab, strict=strict, limit=limit_train,
                           description="training records", gold=gold)
    dev_records = load_records(dev, vocab=project.vocab, strict=strict,
                               description="dev records", gold=gold) if dev else None
    # here, not at start-up: the feedback store's SQLAlchemy loads for this command only
    from tagalign.workflows import train_project

    done = train_project(project, records, dev_records, resume=resume, feedback=feedback,
                         feedback_db=feedback_db)
    # the project is saved: the process may end without freeing the training's records and
    # models object by object (`skip_teardown`)
    skip_teardown()
    console.log(f"[bold green]trained[/] {project.config.recipe} in "
                f"{done.seconds:.0f} s → {project_dir}")
    if done.gold_mapped or done.gold_dropped:
        console.log(f"gold subjects of {done.gold_mapped} records mapped to the targets of "
                    f"redirected headings; {done.gold_dropped} gold ids of deleted or split "
                    "headings dropped (vocab update)")
    if done.dev_scores is not None:
        out.print(report_tables(done.dev_scores))
