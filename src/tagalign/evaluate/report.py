"""Readable tables of an evaluation report (rich): overall, by language, by type, by both.

Each table has one row per group and cut-off k (P, R, F1, R-precision, nDCG at k) and a
closing row per group with the averages over the ks (avg R@k, avg F1@k), so it stays
narrow enough for an 80-column terminal however many ks are asked for. With a
``by_frequency`` part (`tagalign.evaluate.frequency`) one more table: per group and
train-count bucket, the gold subjects, records, share of gold and micro recall@k.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

SECTIONS = (("by_language", "by language"), ("by_type", "by record type"),
            ("by_type_language", "by record type / language"))


def _cell(value: float) -> str:
    return f"{value:.4f}"


def report_table(title: str, groups: dict[str, dict], ks: list[int]) -> Table:
    """One table; groups with no scored record are left out."""
    table = Table(title=title, title_justify="left")
    for name in ("group", "k", "n"):
        table.add_column(name, justify="left" if name == "group" else "right")
    for name in ("P", "R", "F1", "R-prec", "nDCG"):
        table.add_column(name, justify="right")
    for name, m in groups.items():
        if not m.get("n"):
            continue
        for i, k in enumerate(ks):
            table.add_row(name if i == 0 else "", str(k), str(m["n"]) if i == 0 else "",
                          _cell(m[f"precision@{k}"]), _cell(m[f"recall@{k}"]),
                          _cell(m[f"f1@{k}"]), _cell(m[f"r-precision@{k}"]),
                          _cell(m[f"ndcg@{k}"]))
        table.add_row("", "avg", "", "", _cell(m["avg_recall"]), _cell(m["avg_f1"]), "", "",
                      end_section=True, style="bold")
    return table


def frequency_table(part: dict) -> Table:
    """The ``by_frequency`` part as one table: overall, then each language."""
    ks, cut = part["ks"], part["common_min"]
    title = (f"by train frequency (unseen 0, rare 1–{cut - 1}, common ≥{cut} training "
             "records; micro recall of the bucket's gold subjects)")
    table = Table(title=title, title_justify="left")
    table.add_column("group")
    table.add_column("bucket")
    for name in ("gold", "records", "share", *(f"R@{k}" for k in ks)):
        table.add_column(name, justify="right")
    groups = {"all": part["overall"], **part["by_language"]}
    for g, (name, buckets) in enumerate(groups.items()):
        for i, (bucket, m) in enumerate(buckets.items()):
            table.add_row(name if i == 0 else "", bucket, str(m["gold"]), str(m["records"]),
                          f"{m['share']:.1%}",
                          *("–" if m[f"recall@{k}"] is None else _cell(m[f"recall@{k}"])
                            for k in ks),
                          end_section=i == len(buckets) - 1 and g < len(groups) - 1)
    return table


def report_tables(report: dict) -> Group:
    """The report's tables, one renderable for the caller to print (the CLI: stdout)."""
    ks = report["ks"]
    parts: list = [report_table("overall", {"all": report["overall"]}, ks)]
    parts += [report_table(title, report[key], ks) for key, title in SECTIONS]
    if "by_frequency" in report:
        parts.append(frequency_table(report["by_frequency"]))
    if report.get("missing_predictions"):
        parts.append(Text(f"{report['missing_predictions']} records had no prediction "
                          "(scored as empty rankings)"))
    return Group(*parts)
