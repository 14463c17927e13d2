"""`tagalign serve` and `tagalign feedback export`."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from tagalign.cli.app import (
    app,
    console,
    feedback_app,
    must_exist,
    refuse,
    skip_teardown,
)
from tagalign.cli.common import COMPILE_HELP, MMAP_HELP
from tagalign.project import feedback_location
from tagalign.serve import MAX_BODY, MAX_BODY_ENV, accesslog
from tagalign.serve.settings import ServerSettings
from tagalign.serve.tokens import TOKENS_ENV

#: the environment variable of ``--allowed-host``: names separated by spaces
ALLOWED_HOSTS_ENV = "TAGALIGN_ALLOWED_HOSTS"


@app.command(short_help="Serve Annif's REST API, tagalign's own API and the librarians' page.")
def serve(
    projects: list[Path] = typer.Argument(None, help="Trained project folders to serve (or --projects)."),
    projects_file: Path = typer.Option(None, "--projects", help="A projects.toml: serve its projects (see `tagalign list-projects`)."),
    only: str = typer.Option(None, "--only", help="With --projects: only these ids (comma-separated)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    feedback_db: str = typer.Option(None, "--feedback-db",
                                    help="SQLAlchemy URL of one feedback store for all projects, rows keyed by each project's folder name (default: a projects-file table's feedback_db, else each project's own PROJECT/feedback.sqlite)."),
    records: Path = typer.Option(None, "--records", help="Records file the web page can fetch by id."),
    threads: int = typer.Option(0, "--threads", min=0, help="CPU threads for the models of "
                                "each worker (0 = the cores, shared out among the workers)."),
    compile_ranker: bool = typer.Option(True, "--compile-ranker/--no-compile-ranker", help=COMPILE_HELP),
    mmap: bool = typer.Option(False, "--mmap", help=MMAP_HELP + " Learn requests are refused "
                              "(409; 403 on Annif's /v1). With --workers, the workers share "
                              "the mapped pages."),
    allow_learn: bool = typer.Option(False, "--allow-learn",
                                     help="Let the project folders given as arguments learn from "
                                     "/learn requests (off by default, as in Annif: 403). With "
                                     "--projects, each table's allow_learn decides."),
    max_body: int = typer.Option(MAX_BODY, "--max-body", envvar=MAX_BODY_ENV, min=1,
                                 help="Largest request body in bytes (413 above; Annif's "
                                 "default, 20 MB)."),
    queue: Path = typer.Option(None, "--queue", help="Records file to review one after another "
                               "on the web page: JSONL, MARC 21 or MARC-XML (progress kept in "
                               "the feedback store; MARC records keep their control numbers "
                               "through to `feedback export`)."),
    release_above: float = typer.Option(None, "--release-above", min=0.0, max=1.0,
                                        help="With --queue: leave out records whose estimated "
                                        "recall is at least this (when estimates exist)."),
    allowed_host: list[str] = typer.Option(None, "--allowed-host", metavar="NAME", envvar=ALLOWED_HOSTS_ENV,
                                           help="A Host name clients "
                                           "use besides --host, localhost, 127.0.0.1 and [::1] "
                                           "(others: 421; '*': any). Repeatable; or "
                                           f"{ALLOWED_HOSTS_ENV}, names separated by spaces "
                                           "(a container's setting)."),
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
    workers: int = typer.Option(1, "--workers", min=1, help="Worker processes behind the "
                                "port, each with its own models (1: this process serves). "
                                "Learned records reach every worker through the feedback "
                                "store."),
    preload: bool = typer.Option(True, "--preload/--no-preload", help="With --workers: load "
                                 "the models once, before the workers start, and fork them "
                                 "from that process: the workers share the models' memory "
                                 "(--no-preload: each worker loads its own)."),
    graceful_timeout: float = typer.Option(30.0, "--graceful-timeout", min=0.0,
                                           help="On SIGTERM: seconds requests in flight may "
                                           "take to finish before they are cancelled."),
    domains: Path = typer.Option(None, "--domains", help="A domain model trained on the project (`tagalign classify train --subjects-project`): /tagalign/v1 answers and the page give each record's domains beside its subjects. One project folder; with --projects, the table's domains key."),
) -> None:
    """Serve Annif's REST API at /v1, tagalign's own API at /tagalign/v1 (docs at /docs)
    and the librarians' web page at /. Give Annif clients http://HOST:PORT/v1/ as base URL.

    Example: tagalign serve gnd-hybrid --port 8000 --records dev.jsonl.gz --allow-learn

    Several projects from a projects file: tagalign serve --projects projects.toml --only gnd-hybrid,gnd-lexical

    Read-only, less memory: tagalign serve gnd-hybrid --mmap

    Two worker processes sharing the mapped model: tagalign serve gnd-hybrid --mmap --workers 2

    New model without downtime: tagalign download … --into gnd-hybrid --force, then
    kill -HUP SERVER_PID (or POST /tagalign/v1/projects/gnd-hybrid/reload)

    Review queue: tagalign serve gnd-hybrid --queue new.jsonl.gz --release-above 0.8

    Domains beside the subjects: tagalign serve gnd-hybrid --domains domains-stack

    JSON access log for a collector: tagalign serve gnd-hybrid --log-format json > access.jsonl
    """
    from tagalign.cli.tokens_cmd import serving_tokens, tokens_path

    if release_above is not None and queue is None:
        refuse("--release-above needs --queue")
    if bool(projects) == bool(projects_file):
        refuse("give project folders or --projects FILE (one of the two)")
    if domains is not None and (projects_file is not None or len(projects or []) != 1):
        refuse("--domains goes with one project folder; in a projects file, give each "
               "project's domain model as its domains key", 2)
    # read once here (a bad file stops the start, before workers exist); each serving
    # process reads it again from the path (a TokenStore holds a lock: not for pickling)
    tokens = tokens_path(tokens_file, projects_file)
    if tokens is not None:
        serving_tokens(tokens, None)
    if require_token_for_suggest and tokens is None:
        refuse("--require-token-for-suggest needs --tokens-file (or tokens_file in --projects)",
               2)
    for path, what in ((records, "--records"), (queue, "--queue"), (domains, "--domains")):
        if path is not None:
            must_exist(path, f"{what}: not found: {path}")
    settings = ServerSettings(
        projects=[str(p) for p in projects or []],
        projects_file=str(projects_file) if projects_file else None, only=only,
        feedback_db=feedback_db, records=str(records) if records else None,
        queue=str(queue) if queue else None, release_above=release_above, threads=threads,
        compile_ranker=compile_ranker, mmap=mmap, allow_learn=allow_learn, max_body=max_body,
        allowed_hosts=[host, *(allowed_host or [])], cors_origins=cors_origin or [],
        workers=workers, tokens_file=str(tokens) if tokens else None,
        require_token_for_suggest=require_token_for_suggest, metrics=metrics,
        log_format=log_format, preload=preload, domains=str(domains) if domains else None)
    if host in ("0.0.0.0", "::") and not allowed_host:
        console.log("[yellow]requests are answered only for Host localhost, 127.0.0.1 and "
                    "[::1]: give --allowed-host NAME for the names clients use[/]")
    where = (f"http://{host}:{port}/  (Annif clients: http://{host}:{port}/v1/; tagalign's "
             "API docs at /docs)")
    if workers == 1:
        console.log(f"serving on {where}")
    else:
        console.log(f"serving on {where} with {workers} worker processes (supervisor pid "
                    f"{os.getpid()}: SIGHUP reloads changed models, SIGTERM stops)")
    # here, not at the top: the web framework loads only when a server starts
    from tagalign.serve.server import serve as run

    skip_teardown()  # the models are freed with the process, not object by object
    run(settings, host, port, graceful_timeout)


@feedback_app.command("export", short_help="Write the reviewed records as training JSONL or as MARC.")
def export(
    source: Path = typer.Argument(..., help="A project folder, an SQLite file, or with --projects a project id."),
    out: Path = typer.Option(..., "--out", "-o", help="File to write: training JSONL, or MARC by --format or the name (.mrc, .xml); .gz ok."),
    projects_file: Path = typer.Option(None, "--projects", help="A projects.toml: SOURCE is one of its ids (its path and feedback_db)."),
    feedback_db: str = typer.Option(None, "--feedback-db", help="SQLAlchemy URL of the store (as given to serve)."),
    project: str = typer.Option(None, "--project", help="Only the rows of this project key (default with a project: its folder name; with an SQLite file: all)."),
    output_format: str = typer.Option(None, "--format", help="jsonl (training data), marc (binary MARC 21) or marcxml: each reviewed record's control number and accepted subjects as 650 with an 883 (default: by --out's name: .mrc/.marc, .xml, else jsonl)."),
    merge: Path = typer.Option(None, "--merge", help="MARC: the catalogue's own records (MARC 21 or MARC-XML); each reviewed one comes back whole, the decided subjects added."),
    since: str = typer.Option(None, "--since", help="Only records decided at or after this ISO date or date and time (UTC unless it says), e.g. 2026-11-27."),
    agency: str = typer.Option(None, "--agency", help="MARC: the agency in 883 $q (default: the record's 003, else tagalign)."),
    vocab: Path = typer.Option(None, "--vocab", help="The project folder whose vocabulary gives the labels of 650 $a and the targets of redirected headings (default: SOURCE's project; MARC from an SQLite file needs it)."),
) -> None:
    """Write the records librarians reviewed: as training JSONL (of each record, the
    subjects its latest decision accepted), or as MARC for the catalogue (650 linked to an
    883: an accepted suggestion intellectually confirmed, a subject added by search
    intellectual; see docs/formats.md). Decisions on headings since redirected are
    written as their targets, those on deleted or split headings left out (the project's
    vocabulary, updated by `tagalign vocab update`).

    Example: tagalign feedback export gnd-hybrid --out confirmed.jsonl

    The day's decisions for the catalogue, into its own records:
    tagalign feedback export gnd-hybrid --out reviewed.xml --since 2026-11-27 --merge catalogue.xml
    """
    from tagalign.feedback import FeedbackStore, sqlite_file, sqlite_url
    from tagalign.feedback.export import (
        Labels,
        export_file,
        no_labels,
        parse_since,
        vocabulary_labels,
    )
    from tagalign.predictions.marc import output_format as format_of
    from tagalign.vocab import Vocabulary
    from tagalign.vocab.vocabulary import SAVED_NAME

    fmt = format_of(out, output_format)
    if fmt not in ("jsonl", "marc", "marcxml"):
        refuse(f"--format {fmt}: use jsonl, marc or marcxml", 2)
    marc = fmt != "jsonl"
    if not marc and (merge is not None or agency is not None):
        refuse("--merge and --agency go with MARC output (--format marc or marcxml)", 2)
    start = parse_since(since) if since is not None else None
    folder = None
    if projects_file is not None:
        from tagalign.projects_file import read_project

        spec = read_project(projects_file, str(source))
        url, key = feedback_location(spec.path, spec.serving.feedback_db, feedback_db)
        folder = spec.path
    elif source.is_dir() or not source.exists():
        url, key = feedback_location(source, None, feedback_db)
        folder = source
    else:  # an SQLite file: every project's rows unless --project
        url, key = feedback_db or sqlite_url(source), None
    key = project or key
    if marc:
        if key is None:
            refuse("MARC holds one project's decisions: give --project KEY", 2)
        if vocab is None and folder is None:
            refuse("MARC from an SQLite file: give --vocab PROJECT (the labels of 650 $a)", 2)
    for path, what in ((merge, "--merge"), (vocab, "--vocab")):
        if path is not None:
            must_exist(path, f"{what}: not found: {path}")
    # the labels of 650 $a and the targets of redirected headings (JSONL: where there is one)
    where = vocab or folder
    known = (Vocabulary.load(where) if where is not None
             and (marc or vocab is not None or (where / SAVED_NAME).exists()) else None)
    labels: Labels = vocabulary_labels(known) if marc and known is not None else no_labels
    db = sqlite_file(url)
    if db is not None:
        must_exist(db, f"no feedback store at {db}")
    store = FeedbackStore(url)
    try:
        done = export_file(out, store.reviewed(key, start), fmt, labels, agency=agency,
                           merge=merge, successor=known.successor if known else None)
    finally:
        store.close()
    what = "reviewed records" if marc else "confirmed records"
    console.print(f"{done.written} {what} written to {out}")
    if done.mapped or done.dropped:
        console.print(f"{done.mapped} decided subjects written as the targets of redirected "
                      f"headings, {done.dropped} of deleted or split headings left out")
    if done.not_in_merge:
        console.log(f"[yellow]{done.not_in_merge} reviewed records are not in {merge}: not "
                    "written[/]")
