"""`tagalign vocab load|show`."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from tagalign.cli.app import console, fail, out, vocab_app
from tagalign.records import BadInputError, InputReport
from tagalign.vocab import VOCAB_FORMATS, UnknownFormatError, Vocabulary, load_vocabulary


def _load(source: Path, fmt: str | None, strict: bool = False) -> Vocabulary:
    """Malformed lines/entries are named (path:line) and skipped; --strict stops at the first."""
    report = InputReport(strict=strict)
    try:
        with console.status(f"loading {source} …"):
            vocab = load_vocabulary(source, format=fmt, report=report)
    except UnknownFormatError as exc:
        fail(f"{escape(str(exc))} with --format")
    except (FileNotFoundError, BadInputError) as exc:  # BadInputError: --strict
        fail(escape(str(exc)))
    if report.n_skipped:
        console.print(f"[yellow]{report.n_skipped} malformed lines/entries skipped[/] "
                      f"({len(vocab)} subjects kept); --strict stops at the first")
    return vocab


@vocab_app.command("load")
def load(
    source: Path = typer.Argument(..., help="Vocabulary file (TSV, GND JSON, SKOS, Annif TSV, YAML)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the fast saved form."),
    fmt: str = typer.Option(None, "--format", "-f", help=f"Force a format: {', '.join(sorted(VOCAB_FORMATS))}."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line or entry."),
) -> None:
    """Load a vocabulary from any supported format and save it in the fast form.

    Example: tagalign vocab load gnd-subjects.tsv.gz --out gnd/
    """
    t0 = time.perf_counter()
    vocab = _load(source, fmt, strict)
    t1 = time.perf_counter()
    path = vocab.save(out)
    console.print(f"{len(vocab)} subjects loaded in {t1 - t0:.1f} s, saved to {path} "
                  f"in {time.perf_counter() - t1:.1f} s; languages: {', '.join(vocab.languages)}; "
                  f"fingerprint {vocab.fingerprint}")


@vocab_app.command("show")
def show(
    source: Path = typer.Argument(..., help="Vocabulary (any format or a saved folder)."),
    ids: list[str] = typer.Argument(None, help="Subject ids to show."),
    search: str = typer.Option(None, "--search", "-s", help="Show subjects whose label contains TEXT: exact matches first, then prefixes, word starts, other substrings."),
    limit: int = typer.Option(20, "--limit", "-n", help="Most subjects to show for --search (-1: all)."),
    fmt: str = typer.Option(None, "--format", "-f", help="Force a format."),
) -> None:
    """Show subjects by id, or search labels.

    Example: tagalign vocab show gnd/ 4015065-3    |    tagalign vocab show gnd/ --search Epos
    """
    vocab = _load(source, fmt)
    if search:
        subjects = vocab.search(search, limit)
    else:
        if not ids:
            fail("give subject ids or --search TEXT")
        subjects = []
        for sid in ids:
            subj = vocab.get(sid) or vocab.get(sid.split("/")[-1].removeprefix("gnd:"))
            if subj is None:
                fail(f"subject {sid} is not in the vocabulary ({len(vocab)} subjects)")
            subjects.append(subj)
    table = Table("id", "labels", "alternate", "broader / related", "classification")
    for s in subjects:
        table.add_row(
            s.id, "\n".join(f"{k}: {v}" for k, v in s.labels.items()),
            "\n".join(f"{k}: {', '.join(v)}" for k, v in s.alt_labels.items() if v),
            "\n".join(filter(None, [", ".join(s.broader), ", ".join(s.related)])),
            "\n".join(f"{n} {m}".strip() for n, m in s.classification))
    out.print(table)
    if search:
        console.print(f"{len(subjects)} subjects shown")
