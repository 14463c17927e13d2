"""The root Typer application; command modules attach their commands to it."""

from __future__ import annotations

import typer
import typer.rich_utils
from rich.console import Console

app = typer.Typer(
    name="tagalign",
    help="Suggest GND subject headings for library records.\n\n"
    "Example: tagalign train my-project --vocab gnd-subjects.tsv.gz --train train.jsonl.gz",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
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


def fail(message: str, code: int = 1) -> None:
    """Print a one-line error and exit (no traceback for user errors)."""
    console.print(f"[bold red]error:[/] {message}", soft_wrap=True, markup=True)
    raise typer.Exit(code)
