"""`tagalign serve` and `tagalign feedback export`."""

from __future__ import annotations

from pathlib import Path

import typer

from tagalign.cli.app import app, console, fail, feedback_app
from tagalign.cli.common import MMAP_HELP, load_records
from tagalign.project import Project, ProjectError
from tagalign.runtime import set_threads
from tagalign.vocab import VocabularyMismatchError


@app.command()
def serve(
    projects: list[Path] = typer.Argument(..., help="Trained project folders to serve."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    feedback_db: str = typer.Option(None, "--feedback-db",
                                    help="SQLAlchemy URL of the feedback store (default: SQLite file in the first project)."),
    records: Path = typer.Option(None, "--records", help="Records file the web page can fetch by id."),
    threads: int = typer.Option(0, "--threads", help="CPU threads for the models (0 = all)."),
    mmap: bool = typer.Option(False, "--mmap", help=MMAP_HELP + " Learn requests are refused "
                              "(409; 403 on Annif's /v1)."),
    queue: Path = typer.Option(None, "--queue", help="Records file to review one after another "
                               "on the web page (progress kept in the feedback store)."),
    release_above: float = typer.Option(None, "--release-above", min=0.0, max=1.0,
                                        help="With --queue: leave out records whose estimated "
                                        "recall is at least this (when estimates exist)."),
) -> None:
    """Serve Annif's REST API at /v1, tagalign's own API at /tagalign/v1 (docs at /docs)
    and the librarians' web page at /. Give Annif clients http://HOST:PORT/v1/ as base URL.

    Example: tagalign serve gnd-hybrid --port 8000 --records dev.jsonl.gz

    Read-only, less memory: tagalign serve gnd-hybrid --mmap

    Review queue: tagalign serve gnd-hybrid --queue new.jsonl.gz --release-above 0.8
    """
    import uvicorn

    from tagalign.serve.app import create_app
    from tagalign.serve.feedback import FeedbackStore
    from tagalign.serve.queue import RecordQueue

    if release_above is not None and queue is None:
        fail("--release-above needs --queue")
    set_threads(threads)  # 0 leaves the defaults
    loaded = {}
    for path in projects:
        try:
            with console.status(f"loading {path} …"):
                proj = Project.load(path, mmap=mmap)
        except (ProjectError, VocabularyMismatchError, FileNotFoundError) as exc:
            fail(str(exc))
        if proj.recipe is None:
            fail(f"project {path} is not trained yet; run `tagalign train`")
        if path.name in loaded:  # the folder name is the project id in every URL
            fail(f"two projects are named {path.name!r}; rename one folder")
        loaded[path.name] = proj
        console.log(f"project {path.name}: {proj.config['recipe']}, {len(proj.vocab)} subjects"
                    + (" (memory-mapped, read-only)" if mmap else ""))
    store = FeedbackStore(feedback_db) if feedback_db else FeedbackStore.for_project(projects[0])
    recs = {r.id: r for r in load_records(records)} if records else {}
    review = None
    if queue:
        try:
            review = RecordQueue(load_records(queue), release_above)
        except ValueError as exc:
            fail(f"{queue}: {exc}")
        for pid, proj in loaded.items():
            with console.status(f"choosing the records of {pid}'s queue …"):
                sel = review.select(pid, proj)
            console.log(f"queue for {pid}: {len(sel.records)} records"
                        + (f" ({sel.skipped} released above {release_above})" if sel.estimated
                           else " (no quality estimates: all records)"
                           if release_above is not None else ""))
    app_ = create_app(loaded, store, recs, review)
    console.log(f"serving on http://{host}:{port}/  (Annif clients: http://{host}:{port}/v1/;"
                " tagalign's API docs at /docs)")
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@feedback_app.command("export")
def export(
    source: Path = typer.Argument(..., help="A project folder (its feedback.sqlite) or an SQLite file."),
    out: Path = typer.Option(..., "--out", "-o", help="Training JSONL(.gz) to write."),
    feedback_db: str = typer.Option(None, "--feedback-db", help="SQLAlchemy URL instead of SOURCE's file."),
    project: str = typer.Option(None, "--project", help="Only this project's feedback."),
) -> None:
    """Write the records librarians confirmed as training JSONL.

    Example: tagalign feedback export gnd-hybrid --out confirmed.jsonl
    """
    from tagalign.serve.feedback import FeedbackStore, sqlite_url

    if feedback_db:
        url = feedback_db
    else:
        db = source / "feedback.sqlite" if source.is_dir() else source
        if not db.exists():
            fail(f"no feedback store at {db}")
        url = sqlite_url(db)
        if project is None and source.is_dir():
            project = source.name
    n = FeedbackStore(url).export_jsonl(out, project)
    console.print(f"{n} confirmed records written to {out}")
