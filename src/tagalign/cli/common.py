"""Helpers shared by CLI commands: reading records with progress, parsing options."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from tagalign.cli.app import console, fail
from tagalign.records import BadInputError, InputReport, Record, read_records

#: help of ``--mmap`` (serve, suggest): what it does and what it costs
MMAP_HELP = ("Map the model's large arrays (vector indexes, record matrices, label lists) "
             "from its files instead of reading them into memory: less memory, shared by "
             "processes on one machine; the first queries read from disk, and the project "
             "is read-only (no learning).")


def progress(transient: bool = False) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), console=console, transient=transient)


def iter_records(path: Path, *, vocab=None, strict: bool = False, limit: int | None = None,
                 report: InputReport | None = None) -> Iterator[Record]:
    """Stream records; a missing file or a strict-mode error ends the command cleanly."""
    report = report or InputReport(strict=strict)
    try:
        yield from read_records(path, report=report, vocab=vocab, limit=limit)
    except FileNotFoundError as exc:
        fail(str(exc))
    except (BadInputError, ValueError) as exc:
        fail(str(exc))
    report.print_summary()


def load_records(path: Path, *, vocab=None, strict: bool = False, limit: int | None = None,
                 description: str = "reading records") -> list[Record]:
    out: list[Record] = []
    with progress(transient=True) as bar:
        task = bar.add_task(f"{description} ({Path(path).name})", total=limit, rate="")
        for rec in iter_records(path, vocab=vocab, strict=strict, limit=limit):
            out.append(rec)
            if len(out) % 1000 == 0:
                bar.update(task, completed=len(out))
    console.log(f"{len(out)} records from {path}")
    return out


def parse_params(pairs: list[str] | None, config: Path | None) -> dict[str, Any]:
    """Recipe parameters from ``--config FILE.json`` and repeated ``--param key=value``."""
    params: dict[str, Any] = {}
    if config is not None:
        try:
            params.update(json.loads(Path(config).read_text("utf-8")))
        except (OSError, json.JSONDecodeError) as exc:
            fail(f"cannot read --config {config}: {exc}")
    for pair in pairs or []:
        if "=" not in pair:
            fail(f"--param {pair!r}: expected key=value")
        key, raw = pair.split("=", 1)
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params
