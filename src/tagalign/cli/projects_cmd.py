"""`tagalign list-projects`, `show-project`, `upload` and `download`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from tagalign.cli.app import app, console
from tagalign.projects_file import (
    ProjectSpec,
    describe,
    open_project,
    read_project,
    read_projects,
)

PROJECTS_HELP = "The projects file (TOML, one [table] per project)."


def _specs(projects_file: Path) -> dict[str, ProjectSpec]:
    return read_projects(projects_file)


def _open(spec: ProjectSpec):
    """The spec's project, or None when its folder holds none and no vocab is named."""
    if not spec.trained_folder and spec.vocab is None:
        return None
    return open_project(spec)


@app.command("list-projects")
def list_projects(
    projects_file: Path = typer.Option(Path("projects.toml"), "--projects", help=PROJECTS_HELP),
) -> None:
    """List the projects of a projects file, and which are trained.

    Example: tagalign list-projects --projects projects.toml
    """
    table = Table("id", "name", "recipe", "language", "trained", "learn", "excluded", "path")
    for pid, spec in _specs(projects_file).items():
        proj = _open(spec)
        trained = "yes" if proj is not None and proj.is_trained else "not trained"
        excluded = str(len(proj.excluded)) if proj is not None else "?"
        serving = spec.serving
        table.add_row(pid, serving.name or pid, spec.recipe or (proj and proj.config.recipe)
                      or "?", serving.language or "", trained,
                      "allowed" if serving.allow_learn else "no", excluded, str(spec.path))
    # the table is the command's result: stdout
    from rich.console import Console

    Console().print(table)


@app.command("show-project",
             short_help="Show a project's settings, vocabulary rules and training state.")
def show_project(
    project_id: str = typer.Argument(..., help="A project id (a table of the projects file)."),
    projects_file: Path = typer.Option(Path("projects.toml"), "--projects", help=PROJECTS_HELP),
) -> None:
    """Show one project's settings, vocabulary rules and training state (JSON on stdout).

    Example: tagalign show-project gnd-hybrid --projects projects.toml
    """
    spec = read_project(projects_file, project_id)
    info = describe(spec, _open(spec))
    print(json.dumps(info, ensure_ascii=False, indent=2))


@app.command(short_help="Pack a trained project into a verified archive at any fsspec URL.")
def upload(
    project_dir: Path = typer.Argument(..., help="A trained project folder."),
    url: str = typer.Argument(..., help="Where to: an archive URL (….tar.gz / ….tar) or a "
                              "folder URL (PROJECT.tar.gz is added): file://, memory://, "
                              "s3:// (pip install 'tagalign[s3]'), hf://…"),
) -> None:
    """Pack a trained project into one archive (files + a manifest of SHA-256 hashes,
    versions and vocabulary fingerprint) and write it to any fsspec URL.

    Example: tagalign upload gnd-hybrid file:///srv/models/

    To the Hugging Face Hub: tagalign upload gnd-hybrid hf://datasets/my-org/tagalign-models/
    """
    from tagalign.shipping import upload as ship

    target, manifest = ship(project_dir, url)
    size = sum(f["size"] for f in manifest["files"].values())
    console.log(f"{len(manifest['files'])} files ({size / 1e6:.1f} MB) uploaded")
    print(target)


@app.command(short_help="Fetch a project archive, verify every file, then install it.")
def download(
    url: str = typer.Argument(..., help="A project archive written by `tagalign upload`, "
                              "or the folder URL given to upload (its INTO.tar.gz, else "
                              "its only .tar.gz)."),
    into: Path = typer.Option(None, "--into", help="Project folder to write (default: the "
                              "project id, in the current folder)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing project folder "
                               "(only once the archive has verified); its feedback.sqlite "
                               "moves into the new version, work/ is dropped. A folder "
                               "without project.json is never replaced."),
    trust: bool = typer.Option(False, "--trust", help="Allow a source that is not local. "
                               "Local (file://, plain paths, memory://) is trusted; s3://, "
                               "hf:// and every other store need --trust."),
    wait: float = typer.Option(0.0, "--wait", min=0, metavar="SECONDS", help="Another "
                               "download into the same folder running: wait this long for "
                               "it to finish (default: refuse at once, naming its pid)."),
) -> None:
    """Fetch a project archive and verify every file's size and SHA-256 before anything is
    replaced. Refused, leaving an existing project untouched: entries that leave the
    folder, links, files missing from or extra to the manifest, sizes other than the
    manifest's, work/ or feedback entries, failed hashes, pickles, damaged archives.
    One download into a folder at a time (a second is refused naming the first's pid, or
    waits with --wait); a server reloading the folder meanwhile loads one version whole.

    Example: tagalign download file:///srv/models/gnd-hybrid.tar.gz --into gnd-hybrid

    From the Hugging Face Hub: tagalign download hf://datasets/my-org/tagalign-models/gnd-hybrid.tar.gz --trust
    """
    from tagalign.shipping import download as fetch

    target, manifest = fetch(url, into, force=force, trust=trust, wait=wait)
    console.log(f"{len(manifest['files'])} files verified; project {manifest.get('name')} "
                f"({manifest.get('recipe')}, tagalign {manifest['versions'].get('tagalign')})")
    print(target)
