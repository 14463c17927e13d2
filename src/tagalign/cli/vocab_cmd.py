"""`tagalign vocab load|show`."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from tagalign.cli.app import console, out, refuse, vocab_app
from tagalign.cli.common import read_vocabulary
from tagalign.errors import NotFoundError
from tagalign.records import InputReport
from tagalign.vocab import VOCAB_FORMATS, Subject, Vocabulary, normalize_subject_id


def _load(source: Path, fmt: str | None, strict: bool = False,
          entity_types: str | None = None) -> Vocabulary:
    """Malformed lines/entries are named (path:line) and skipped; --strict stops at the first."""
    report = InputReport(strict=strict)
    vocab = read_vocabulary(source, report, fmt, "--format", entity_types)
    if report.n_skipped:
        console.print(f"[yellow]{report.n_skipped} malformed lines/entries skipped[/] "
                      f"({len(vocab)} subjects kept); --strict stops at the first")
    return vocab


@vocab_app.command("load")
def load(
    source: Path = typer.Argument(..., help="Vocabulary file (TSV, GND JSON, GND MARC 21 authority dump, SKOS, Annif TSV, YAML)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the fast saved form."),
    fmt: str = typer.Option(None, "--format", "-f", help=f"Force a format: {', '.join(VOCAB_FORMATS.names())}."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line or entry."),
    entity_types: str = typer.Option(None, "--entity-types", help="GND authority dump: the entity types to keep, codes of 075 $b separated by commas (s subject headings, g places, p persons, b corporate bodies, f conferences, u works) or all. Default: s."),
) -> None:
    """Load a vocabulary from any supported format and save it in the fast form.

    Example: tagalign vocab load gnd-subjects.tsv.gz --out gnd/    |    tagalign vocab load
    authorities-gnd-sachbegriff_dnbmarc_20240213.mrc.xml.gz --out gnd/    |    tagalign vocab
    load authorities-gnd_dnbmarc.mrc.xml.gz --entity-types s,g,p,b,f,u --out gnd-all/
    """
    t0 = time.perf_counter()
    vocab = _load(source, fmt, strict, entity_types)
    t1 = time.perf_counter()
    path = vocab.save(out)
    console.print(f"{len(vocab)} subjects loaded in {t1 - t0:.1f} s, saved to {path} "
                  f"in {time.perf_counter() - t1:.1f} s; languages: {', '.join(vocab.languages)}; "
                  f"fingerprint {vocab.fingerprint}")


def _lookup(vocab: Vocabulary, key: str) -> list[Subject]:
    """The subject with id ``key`` (or its GND URI), else every subject with a label
    (preferred or alternative) equal to it."""
    subj = (vocab.get(key) or vocab.get(normalize_subject_id(key))
            or vocab.get(key.split("/")[-1].removeprefix("gnd:")))
    if subj is not None:
        return [subj]
    return [m.subject for m in vocab.prefix_index.exact(key)]


#: relations listed per kind before "… N more"
MAX_RELATED = 8


def _relations(vocab: Vocabulary, s: Subject) -> str:
    """``broader: Label (id)`` lines: each related subject named by its label."""
    lines = []
    for kind in ("broader", "narrower", "related"):
        ids = getattr(s, kind)
        for sid in ids[:MAX_RELATED]:
            other = vocab.get(sid)
            lines.append(f"{kind}: {other.label()} ({sid})" if other else f"{kind}: {sid}")
        if len(ids) > MAX_RELATED:
            lines.append(f"{kind}: … {len(ids) - MAX_RELATED} more")
    return "\n".join(lines)


@vocab_app.command("show", short_help="Show subjects by id or label, or search their labels.")
def show(
    source: Path = typer.Argument(..., help="Vocabulary (any format or a saved folder)."),
    ids: list[str] = typer.Argument(None, help="Subject ids (or URIs), or labels: a subject whose preferred or alternative label equals one is shown."),
    search: str = typer.Option(None, "--search", "-s", help="Show subjects whose label (preferred or alternative) contains TEXT: exact matches first, then prefixes, word starts, other substrings."),
    limit: int = typer.Option(20, "--limit", "-n", help="Most subjects to show for --search (-1: all)."),
    fmt: str = typer.Option(None, "--format", "-f", help="Force a format."),
) -> None:
    """Show subjects by id or label, or search labels: alternative labels, broader,
    narrower and related subjects (with their labels), classification and entity type.

    Example: tagalign vocab show gnd/ 4015065-3    |    tagalign vocab show gnd/ --search Epos
    """
    vocab = _load(source, fmt)
    if search:
        subjects = vocab.search(search, limit)
    else:
        if not ids:
            refuse("give subject ids or --search TEXT")
        subjects = []
        for key in ids:
            found = _lookup(vocab, key)
            if not found:
                raise NotFoundError(f"subject {key} is not in the vocabulary ({len(vocab)} "
                                    "subjects; no label equals it either)")
            subjects.extend(s for s in found if s not in subjects)
    table = Table("id", "labels", "alternate", "broader / narrower / related",
                  "classification / type")
    for s in subjects:
        table.add_row(
            s.id, "\n".join(f"{k}: {v}" for k, v in s.labels.items()),
            "\n".join(f"{k}: {', '.join(v)}" for k, v in s.alt_labels.items() if v),
            _relations(vocab, s),
            "\n".join([f"{n} {m}".strip() for n, m in s.classification]
                      + ([f"type: {', '.join(s.entity_types)}"] if s.entity_types else [])))
    out.print(table)
    if search:
        console.print(f"{len(subjects)} subjects shown")
