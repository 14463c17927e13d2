"""The root Typer application; command modules attach their commands to it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NoReturn

import click
import typer
import typer.core
import typer.rich_utils
from rich.console import Console
from rich.markup import escape

from tagalign.errors import (
    InputError,
    MissingFileError,
    NoSpaceError,
    TagalignError,
    UsageError,
    is_no_space,
)
from tagalign.runtime import show_log


class TagalignGroup(typer.core.TyperGroup):
    """The root command: the one place a `TagalignError` from any command becomes
    ``error: <message>`` and the error's exit code (no traceback), and so does a full disk
    (ENOSPC, EDQUOT: `NoSpaceError`) whatever raised it. Commands catch no error to print
    it: the library raises the package's errors with their message, and a command's own
    refusals go through `refuse` and `must_exist`."""

    def invoke(self, ctx: click.Context) -> Any:
        log_to_console()
        try:
            return super().invoke(ctx)
        except TagalignError as exc:
            fail(escape(str(exc)), exc.exit_code)
        except Exception as exc:  # a full disk, wherever it struck: one line too
            if not is_no_space(exc):
                raise
            err = NoSpaceError.of(exc)
            fail(escape(str(err)), err.exit_code)


app = typer.Typer(
    name="tagalign",
    help="Suggest GND subject headings for library records.\n\n"
    "Example: tagalign train my-project --vocab gnd-subjects.tsv.gz --train train.jsonl.gz",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    cls=TagalignGroup,
)
vocab_app = typer.Typer(help="Load and inspect subject vocabularies.", no_args_is_help=True)
records_app = typer.Typer(help="Inspect record files.", no_args_is_help=True)
data_app = typer.Typer(help="Fetch public datasets.", no_args_is_help=True)
feedback_app = typer.Typer(help="Librarians' feedback stored by `tagalign serve`.",
                           no_args_is_help=True)
app.add_typer(vocab_app, name="vocab")
app.add_typer(records_app, name="records")
app.add_typer(data_app, name="data")
app.add_typer(feedback_app, name="feedback")

#: progress, log lines, warnings and errors
console = Console(stderr=True)
# usage errors (click's) read like ours, `error: …` (typer titles its panel "Error")
typer.rich_utils.ERRORS_PANEL_TITLE = "error"
#: results (tables, reports): `tagalign records stats f.jsonl > s.txt` keeps them
out = Console()


def log_to_console(level: int = logging.INFO) -> None:
    """The library's log on `console` (stderr), as the CLI showed its own messages."""
    show_log(console, level)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print a one-line error (rich markup) and exit (no traceback for user errors): what
    `TagalignGroup` does with every error; a command raises instead (`refuse`)."""
    console.print(f"[bold red]error:[/] {message}", soft_wrap=True, markup=True)
    raise typer.Exit(code)


def refuse(message: str, code: int = 1) -> NoReturn:
    """The one way a command refuses its options or arguments (checked before the work
    starts): `InputError`, or `UsageError` with ``code=2``, ending in `TagalignGroup` as
    every error does. ``message`` is plain text (not rich markup)."""
    raise (UsageError if code == UsageError.exit_code else InputError)(message)


def must_exist(path: Path, message: str) -> None:
    """Refuse a file or folder that is not there (`MissingFileError` with ``message``,
    which names it), before the seconds of loading a model."""
    if not Path(path).exists():
        raise MissingFileError(message, path)
