"""`tagalign records stats`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from tagalign.cli.app import out, records_app
from tagalign.cli.common import iter_records, progress
from tagalign.records import InputReport
from tagalign.records.marc.provenance import KINDS, ProvenanceCounts
from tagalign.vocab import load_vocabulary


@records_app.command("stats", short_help="Count records by language and type, gold subjects, provenance.")
def stats(
    source: Path = typer.Argument(..., help="Records (JSONL(.gz), JSON-LD directory, Annif TSV, MARC 21 or MARC-XML)."),
    vocab: Path = typer.Option(None, "--vocab", "-v", help="Check gold ids against a vocabulary."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed record."),
) -> None:
    """Count records by language and type, gold subjects per record, malformed input; and
    how the reader took each subject: by provenance (intellectual: gold; confirmed; machine)
    and, for MARC, by the process (883 $a) that said so, unknown processes listed.

    Example: tagalign records stats train.jsonl.gz --vocab gnd-subjects.tsv.gz
    """
    voc = None
    if vocab is not None:
        voc = load_vocabulary(vocab, report=InputReport(strict=strict))
    langs: Counter = Counter()
    types: Counter = Counter()
    subjects: Counter = Counter()
    kinds = ProvenanceCounts()
    n = n_gold = 0
    report = InputReport(strict=strict)
    with progress(transient=True) as bar:
        task = bar.add_task(f"reading {source.name}", total=None, rate="")
        for rec in iter_records(source, vocab=voc, strict=strict, report=report,
                                processes=True):
            n += 1
            langs[rec.language or "?"] += 1
            types[rec.type or "?"] += 1
            n_gold += len(rec.subjects)
            subjects.update(rec.subjects)
            kinds.add(rec)
            if n % 2000 == 0:
                bar.update(task, completed=n)
    table = Table("measure", "value")
    table.add_row("records", str(n))
    table.add_row("by language", ", ".join(f"{k} {v}" for k, v in langs.most_common()))
    table.add_row("by type", ", ".join(f"{k} {v}" for k, v in types.most_common()))
    table.add_row("gold subjects / record", f"{n_gold / max(n, 1):.2f}")
    table.add_row("distinct subjects", str(len(subjects)))
    table.add_row("subjects by provenance", ", ".join(
        f"{kind} {kinds.kinds[kind]}" for kind in KINDS))
    table.add_row("by process (883 $a)", ", ".join(
        f"{escape(process)} → {kind} {n}" for (process, kind), n in kinds.processes.most_common()))
    table.add_row("unknown processes (by ind1)", ", ".join(
        f"{escape(process)} (ind1 {ind1}) → {kind} {n}"
        for (process, ind1, kind), n in kinds.unknown.most_common()) or "none")
    table.add_row("malformed items skipped", str(report.n_skipped))
    if voc is not None:
        table.add_row("gold ids not in vocabulary", str(sum(report.missing_subjects.values())))
    out.print(table)

