"""`tagalign tokens add|list|remove`: the API tokens `tagalign serve --tokens-file` accepts."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from tagalign.cli.app import app, console
from tagalign.serve.tokens import TOKENS_ENV, TokenStore

tokens_app = typer.Typer(help="API tokens for `tagalign serve --tokens-file`: with a tokens "
                         "file, learn, the review queue's decisions and every other write "
                         "need one.", short_help="API tokens for `tagalign serve --tokens-file`.",
                         no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")

FILE_HELP = "The tokens file (TOML of names and hashes; add creates it, mode 0600)."


@tokens_app.command("add")
def add(
    name: str = typer.Argument(..., help="Who or what uses the token (letters, digits, . _ @ -), e.g. catalogue-plugin."),
    file: Path = typer.Option(..., "--file", envvar=TOKENS_ENV, help=FILE_HELP),
) -> None:
    """Make a new random token, print it once (on stdout) and store only its hash.

    Example: tagalign tokens add catalogue-plugin --file tokens.toml
    """
    token = TokenStore.read(file, missing_ok=True).add(name)
    typer.echo(token)  # alone on stdout: TOKEN=$(tagalign tokens add …) keeps it
    where = escape(str(file))
    console.print(f"token {name!r} added to {where}. It is shown only now: clients send it "
                  f"as the header [bold]Authorization: Bearer TOKEN[/]. A server reading "
                  f"{where} accepts it from its next request.", highlight=False, soft_wrap=True)


@tokens_app.command("list")
def list_tokens(
    file: Path = typer.Option(..., "--file", envvar=TOKENS_ENV, help=FILE_HELP),
) -> None:
    """The names of the tokens and when they were made (never a token or its hash).

    Example: tagalign tokens list --file tokens.toml
    """
    for entry in TokenStore.read(file).entries:
        created = entry.created.strftime("%Y-%m-%d %H:%M:%SZ") if entry.created else "-"
        typer.echo(f"{entry.name}\t{created}")  # tab-separated: scripts read it


@tokens_app.command("remove")
def remove(
    name: str = typer.Argument(..., help="The token's name (see `tagalign tokens list`)."),
    file: Path = typer.Option(..., "--file", envvar=TOKENS_ENV, help=FILE_HELP),
) -> None:
    """Remove a token: servers reading the file refuse it from their next request (403).

    Example: tagalign tokens remove catalogue-plugin --file tokens.toml
    """
    TokenStore.read(file).remove(name)
    console.print(f"token {name!r} removed from {file}", markup=False, highlight=False,
                  soft_wrap=True)


def tokens_path(option: Path | None, projects_file: Path | None) -> Path | None:
    """The tokens file `tagalign serve` checks: ``--tokens-file`` (or its environment
    variable), else the projects file's ``tokens_file`` key, else none (writes as before)."""
    path = option
    if path is None and projects_file is not None:
        from tagalign.projects_file import read_server_keys

        path = read_server_keys(projects_file).tokens_file
    return path


def serving_tokens(option: Path | None, projects_file: Path | None) -> TokenStore | None:
    """The tokens of `tokens_path`, read (and said) once."""
    path = tokens_path(option, projects_file)
    if path is None:
        return None
    store = TokenStore.read(path)
    console.log(f"writes need an API token: {len(store.entries)} in {escape(str(path))}"
                + ("" if store.entries else " [yellow](none yet: every write is refused; "
                   "`tagalign tokens add NAME`)[/]"))
    return store
