"""Readable tables of an evaluation report (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _table(title: str, groups: dict[str, dict], ks: list[int]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("group")
    table.add_column("n", justify="right")
    for k in ks:
        for m in ("P", "R", "F1"):
            table.add_column(f"{m}@{k}", justify="right")
    table.add_column("avg R", justify="right")
    for name, m in groups.items():
        if not m.get("n"):
            continue
        cells = [name, str(m["n"])]
        for k in ks:
            cells += [f"{m[f'precision@{k}']:.4f}", f"{m[f'recall@{k}']:.4f}",
                      f"{m[f'f1@{k}']:.4f}"]
        table.add_row(*cells, f"{m['avg_recall']:.4f}")
    return table


def print_report(report: dict, console: Console | None = None) -> None:
    console = console or Console()
    ks = report["ks"]
    console.print(_table("overall", {"all": report["overall"]}, ks))
    for key, title in (("by_language", "by language"), ("by_type", "by record type"),
                       ("by_type_language", "by record type and language")):
        console.print(_table(title, report[key], ks))
    if report.get("missing_predictions"):
        console.print(f"[yellow]{report['missing_predictions']} records had no prediction "
                      "(scored as empty rankings)[/]")
