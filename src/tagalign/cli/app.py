"""The root Typer application; command modules attach their commands to it."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

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

    # typer vendors click (typer._click): the Context it declares has no public name, its
    # subclass typer.Context does
    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
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


#: set by a command after which this process may end without the interpreter's teardown
#: (`skip_teardown`, read by `main`)
SKIP_TEARDOWN = threading.Event()


def skip_teardown() -> None:
    """Let the `tagalign` command end without the interpreter's teardown once this command
    returns (`main`): for a command that has closed what it wrote and holds a big model. A
    server does after its graceful stop (the feedback store closed by then): freeing a
    1.5M-heading model object by object took 35-65 s after it had stopped serving, while
    its supervisor (systemd, a container runtime) waited for the process to end (issue 48).
    A command invoked in-process (tests, `CliRunner`) is not ended: only `main` reads it."""
    SKIP_TEARDOWN.set()


def main() -> None:
    """The ``tagalign`` console script (and ``python -m tagalign.cli.main``): `app`, ended
    by `os._exit` after a command that asked to (`skip_teardown`): what `atexit` holds
    runs first, the log handlers and standard streams are flushed."""
    try:
        app()
    except SystemExit as done:
        if not SKIP_TEARDOWN.is_set():
            raise
        code = done.code
        if not isinstance(code, int):  # None: success; a message: printed, status 1
            if code is not None:
                print(code, file=sys.stderr)
            code = 0 if code is None else 1
        atexit._run_exitfuncs()  # what the normal exit runs (temporary folders' cleanup, …)
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # closed, or a broken pipe
                stream.flush()
        os._exit(code)


def must_exist(path: Path, message: str) -> None:
    """Refuse a file or folder that is not there (`MissingFileError` with ``message``,
    which names it), before the seconds of loading a model."""
    if not Path(path).exists():
        raise MissingFileError(message, path)
