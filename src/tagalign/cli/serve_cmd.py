"""`tagalign serve` and `tagalign feedback export`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from tagalign.cli.app import app, console, fail, feedback_app
from tagalign.cli.common import COMPILE_HELP, MMAP_HELP, load_records, make_runtime
from tagalign.errors import InputError
from tagalign.project import Project, feedback_location
from tagalign.runtime import Runtime
from tagalign.serve import MAX_BODY, MAX_BODY_ENV, accesslog
from tagalign.serve.tokens import TOKENS_ENV


@app.command()
def serve(
    projects: list[Path] = typer.Argument(None, help="Trained project folders to serve (or --projects)."),
    projects_file: Path = typer.Option(None, "--projects", help="A projects.toml: serve its projects (see `tagalign list-projects`)."),
    only: str = typer.Option(None, "--only", help="With --projects: only these ids (comma-separated)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    feedback_db: str = typer.Option(None, "--feedback-db",
                                    help="SQLAlchemy URL of one feedback store for all projects, rows keyed by each project's folder name (default: a projects-file table's feedback_db, else each project's own PROJECT/feedback.sqlite)."),
    records: Path = typer.Option(None, "--records", help="Records file the web page can fetch by id."),
    threads: int = typer.Option(0, "--threads", min=0, help="CPU threads for the models (0 = all)."),
    compile_ranker: bool = typer.Option(True, "--compile-ranker/--no-compile-ranker", help=COMPILE_HELP),
    mmap: bool = typer.Option(False, "--mmap", help=MMAP_HELP + " Learn requests are refused "
                              "(409; 403 on Annif's /v1)."),
    allow_learn: bool = typer.Option(False, "--allow-learn",
                                     help="Let the project folders given as arguments learn from "
                                     "/learn requests (off by default, as in Annif: 403). With "
                                     "--projects, each table's allow_learn decides."),
    max_body: int = typer.Option(MAX_BODY, "--max-body", envvar=MAX_BODY_ENV, min=1,
                                 help="Largest request body in bytes (413 above; Annif's "
                                 "default, 20 MB)."),
    queue: Path = typer.Option(None, "--queue", help="Records file to review one after another "
                               "on the web page (progress kept in the feedback store)."),
    release_above: float = typer.Option(None, "--release-above", min=0.0, max=1.0,
                                        help="With --queue: leave out records whose estimated "
                                        "recall is at least this (when estimates exist)."),
    allowed_host: list[str] = typer.Option(None, "--allowed-host", metavar="NAME", help="A Host name clients "
                                           "use besides --host, localhost, 127.0.0.1 and [::1] "
                                           "(others: 421; '*': any). Repeatable."),
    cors_origin: list[str] = typer.Option(None, "--cors-origin", metavar="ORIGIN", help="An origin whose pages "
                                          "may POST (learn, suggest-batch) across sites, such "
                                          "as https://catalogue.example.org. Repeatable; by "
                                          "default only GET on /v1, as Annif."),
    tokens_file: Path = typer.Option(None, "--tokens-file", envvar=TOKENS_ENV, help="API tokens (`tagalign "
                                     "tokens add`): learn, the queue's decisions and every other write "
                                     "then need Authorization: Bearer TOKEN (401 without, 403 unknown). "
                                     "Default: the projects file's tokens_file."),
    require_token_for_suggest: bool = typer.Option(False, "--require-token-for-suggest", help="With a "
                                                   "tokens file: suggest and suggest-batch need a token too "
                                                   "(open by default, as in Annif)."),
    metrics: bool = typer.Option(True, "--metrics/--no-metrics", help="Prometheus metrics at GET /metrics (on by default)."),
    log_format: accesslog.LogFormat = typer.Option("auto", "--log-format", help="Access log, one line per request: json (on stdout), text, or auto (text on a terminal, json otherwise)."),
) -> None:
    """Serve Annif's REST API at /v1, tagalign's own API at /tagalign/v1 (docs at /docs)
    and the librarians' web page at /. Give Annif clients http://HOST:PORT/v1/ as base URL.

    Example: tagalign serve gnd-hybrid --port 8000 --records dev.jsonl.gz --allow-learn

    Several projects from a projects file: tagalign serve --projects projects.toml --only gnd-hybrid,gnd-lexical

    Read-only, less memory: tagalign serve gnd-hybrid --mmap

    Review queue: tagalign serve gnd-hybrid --queue new.jsonl.gz --release-above 0.8

    JSON access log for a collector: tagalign serve gnd-hybrid --log-format json > access.jsonl
    """
    import uvicorn

    from tagalign.cli.tokens_cmd import serving_tokens
    from tagalign.serve.app import create_app
    from tagalign.serve.feedback import ServedStores

    if release_above is not None and queue is None:
        fail("--release-above needs --queue")
    runtime = make_runtime(threads, compile_ranker)
    if bool(projects) == bool(projects_file):
        fail("give project folders or --projects FILE (one of the two)")
    tokens = serving_tokens(tokens_file, projects_file)
    if require_token_for_suggest and tokens is None:
        fail("--require-token-for-suggest needs --tokens-file (or tokens_file in --projects)", 2)
    if projects_file:
        loaded = load_projects_file(projects_file, only, mmap=mmap, runtime=runtime)
    else:
        loaded = load_folders(projects, mmap=mmap, allow_learn=allow_learn, runtime=runtime)
    # each project's feedback where train --feedback and feedback export look for it
    try:
        store = ServedStores(loaded, feedback_db)
    except InputError as exc:
        fail(escape(str(exc)))
    recs = {r.id: r for r in load_records(records)} if records else {}
    review = review_queue(queue, release_above, loaded) if queue else None
    app_ = create_app(loaded, store, recs, review, max_body=max_body,
                      allowed_hosts=[host, *(allowed_host or [])],
                      cors_origins=cors_origin or [], tokens=tokens,
                      require_token_for_suggest=require_token_for_suggest,
                      metrics=metrics)
    accesslog.configure(log_format)
    if host in ("0.0.0.0", "::") and not allowed_host:
        console.log("[yellow]requests are answered only for Host localhost, 127.0.0.1 and "
                    "[::1]: give --allowed-host NAME for the names clients use[/]")
    console.log(f"serving on http://{host}:{port}/  (Annif clients: http://{host}:{port}/v1/;"
                " tagalign's API docs at /docs" + (", metrics at /metrics)" if metrics else ")"))
    uvicorn.run(app_, host=host, port=port, log_level="warning")


def _log(pid: str, proj: Project, mmap: bool) -> None:
    state = "" if proj.is_trained else " [yellow](not trained yet: suggest answers 503)[/]"
    console.log(f"project {pid}: {proj.config['recipe']}, {len(proj.vocab)} subjects"
                + (" (memory-mapped, read-only)" if mmap else "")
                + (", learning allowed" if proj.allow_learn else "")
                + (f", {len(proj.excluded)} excluded" if proj.rules else "") + state)


def load_folders(paths: list[Path], *, mmap: bool, allow_learn: bool,
                 runtime: Runtime | None = None) -> dict[str, Project]:
    loaded = {}
    for path in paths:
        try:
            with console.status(f"loading {path} …"):
                proj = Project.load(path, mmap=mmap, runtime=runtime)
        except FileNotFoundError as exc:
            fail(escape(str(exc)))
        proj.trained_recipe()
        if path.name in loaded:  # the folder name is the project id in every URL
            fail(f"two projects are named {path.name!r}; rename one folder")
        proj.allow_learn = allow_learn
        loaded[path.name] = proj
        _log(path.name, proj, mmap)
    return loaded


def load_projects_file(source: Path, only: str | None, *, mmap: bool,
                       runtime: Runtime | None = None) -> dict[str, Project]:
    """The projects of a projects file; one not trained yet is served untrained."""
    from tagalign.projects_file import open_project, read_projects, select

    loaded = {}
    specs = select(read_projects(source),
                   [x.strip() for x in only.split(",") if x.strip()] if only else None,
                   source)
    for pid, spec in specs.items():
        with console.status(f"loading {pid} ({spec.path}) …"):
            loaded[pid] = open_project(spec, mmap=mmap, runtime=runtime)
        if not spec.trained_folder:
            console.log(f"[yellow]{spec.where('path')}: no trained project at "
                        f"{spec.path}[/]")
        _log(pid, loaded[pid], mmap)
    return loaded


def review_queue(queue, release_above: float | None, loaded: dict[str, Project]):
    from tagalign.serve.queue import RecordQueue

    try:
        review = RecordQueue(load_records(queue), release_above, name=queue.name)
    except ValueError as exc:
        fail(f"{queue}: {exc}")
    for pid, proj in loaded.items():
        if not proj.is_trained:
            continue
        with console.status(f"choosing the records of {pid}'s queue …"):
            sel = review.select(pid, proj)
        console.log(f"queue for {pid}: {len(sel.records)} records"
                    + (f" ({sel.skipped} released above {release_above})" if sel.estimated
                       else " (no quality estimates: all records)"
                       if release_above is not None else ""))
    return review


@feedback_app.command("export")
def export(
    source: Path = typer.Argument(..., help="A project folder, an SQLite file, or with --projects a project id."),
    out: Path = typer.Option(..., "--out", "-o", help="Training JSONL(.gz) to write."),
    projects_file: Path = typer.Option(None, "--projects", help="A projects.toml: SOURCE is one of its ids (its path and feedback_db)."),
    feedback_db: str = typer.Option(None, "--feedback-db", help="SQLAlchemy URL of the store (as given to serve)."),
    project: str = typer.Option(None, "--project", help="Only the rows of this project key (default with a project: its folder name; with an SQLite file: all)."),
) -> None:
    """Write the records librarians confirmed as training JSONL (of each record, the
    subjects its latest decision accepted).

    Example: tagalign feedback export gnd-hybrid --out confirmed.jsonl
    """
    from tagalign.serve.feedback import FeedbackStore, sqlite_file, sqlite_url

    if projects_file is not None:
        from tagalign.projects_file import read_projects

        specs = read_projects(projects_file)
        if str(source) not in specs:
            fail(f"{projects_file}: no project {str(source)!r}; known: {', '.join(specs)}")
        spec = specs[str(source)]
        url, key = feedback_location(spec.path, spec.feedback_db, feedback_db)
    elif source.is_dir() or not source.exists():
        url, key = feedback_location(source, None, feedback_db)
    else:  # an SQLite file: every project's rows unless --project
        url, key = feedback_db or sqlite_url(source), None
    db = sqlite_file(url)
    if db is not None and not db.exists():
        fail(f"no feedback store at {db}")
    n = FeedbackStore(url).export_jsonl(out, project or key)
    console.print(f"{n} confirmed records written to {out}")
