"""`tagalign vocab load|show|diff|update`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.table import Table

from tagalign.cli.app import console, out, refuse, vocab_app
from tagalign.cli.common import read_vocabulary
from tagalign.errors import NotFoundError
from tagalign.records import InputReport
from tagalign.vocab import VOCAB_FORMATS, Subject, Vocabulary, normalize_subject_id
from tagalign.vocab.changes import (
    ChangeSummary,
    change_format,
    read_changes,
    read_whole,
    summarize,
)


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


#: the kinds of `ChangeSummary.counts` as `vocab diff` names them
DIFF_ROWS = {"added": "added", "relabelled": "relabelled", "unchanged": "unchanged",
             "redirected": "redirected", "redirected_outside":
             "redirected outside the vocabulary", "split": "split (a librarian decides)",
             "deleted": "deleted",
             "announced": "announced, not yet effective",
             "unknown_skipped": "unknown ids skipped"}


def _print_summary(summary: ChangeSummary) -> None:
    table = Table("change", "headings", "first ones")
    shown = summary.to_dict()
    for kind, n in summary.counts().items():
        if kind == "redirected":
            first = ", ".join(f"{r['id']} → {r['target_label']} ({r['target']})"
                              for r in shown["redirected"])
        else:
            first = ", ".join(shown.get("unknown" if kind == "unknown_skipped" else kind, []))
        table.add_row(DIFF_ROWS[kind], str(n), first)
    out.print(table)


def _formats(given: list[str] | None, paths: list[Path]) -> list[str | None]:
    """Each file's format: ``--format`` given once forces it on every file, given once per
    file each its own (in the order of the files); a folder is a saved vocabulary whatever
    is forced. Without it each file's own, told by its name and first bytes (as `vocab
    load` tells a file's)."""
    if not given:
        return [None] * len(paths)
    if len(given) == 1:
        given = given * len(paths)
    elif len(given) != len(paths):
        refuse(f"--format given {len(given)} times for {len(paths)} files: give it once "
               "(every file) or once per file, in their order")
    return [None if p.is_dir() else f for p, f in zip(paths, given, strict=True)]


def _compared_whole(new: list[Path], whole: bool, fmt: str | None = None) -> bool:
    """Whether ``new`` is one whole newer vocabulary (``--whole``, a folder, or a format
    that says nothing of changes: ``fmt`` if forced) rather than change files."""
    compare_whole = whole or (len(new) == 1 and (new[0].is_dir()
                                                  or change_format(new[0], fmt) is None))
    if compare_whole and len(new) > 1:
        refuse("--whole compares one newer vocabulary, not several files")
    return compare_whole


@vocab_app.command("diff", short_help="What change files or a newer vocabulary change in one.")
def diff(
    old: Path = typer.Argument(..., help="The vocabulary (any format or a saved folder)."),
    new: list[Path] = typer.Argument(..., help="Change files in the order they came (the GND-Änderungsdienst as MARC 21 or MARC-XML, gzipped or not; SKOS with owl:deprecated and dct:isReplacedBy), or one newer vocabulary (any format or a saved folder: compared whole)."),
    whole: bool = typer.Option(False, "--whole", help="NEW is a whole newer dump or release in MARC or SKOS: headings it lacks count as deleted (a change file names only what changed)."),
    fmt: list[str] = typer.Option(None, "--format", "-f", help=f"Force a format ({', '.join(VOCAB_FORMATS.names())}): once for every file, or once per file in their order, OLD first; a saved folder is read as one whatever is forced."),
    entity_types: str = typer.Option(None, "--entity-types", help="GND MARC: the entity types to read from NEW, as for vocab load (default s)."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed records of the change files (named as warnings) instead of refusing them all."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts and the first ids of each kind as JSON."),
) -> None:
    """Count what change files (or a whole newer vocabulary) do to a vocabulary: headings
    added, relabelled, redirected (to which), split, deleted, announced but not yet
    effective, and ids the vocabulary never had (skipped). Changes nothing.

    Example: tagalign vocab diff gnd/ GND_Aenderungsdienst_2024-07.mrc.xml.gz    |    tagalign
    vocab diff gnd/ authorities-gnd-sachbegriff_dnbmarc_20240813.mrc.xml.gz --whole    |
    tagalign vocab diff yso-2023.ttl yso-2024.ttl --whole
    """
    formats = _formats(fmt, [old, *new])
    vocab = _load(old, formats[0])
    report = InputReport()
    if _compared_whole(new, whole, formats[1]):
        changes = read_whole(new[0], vocab, format=formats[1], skip_bad=skip_bad,
                             report=report, entity_types=entity_types, option="--skip-bad")
    else:
        changes = read_changes(new, format=formats[1:], skip_bad=skip_bad, report=report,
                               entity_types=entity_types, option="--skip-bad")
    summary = summarize(changes, vocab)
    if report.n_skipped:
        console.print(f"[yellow]{report.n_skipped} malformed records skipped[/] (--skip-bad)")
    if as_json:
        print(json.dumps(summary.to_dict(), ensure_ascii=False))
        return
    _print_summary(summary)



UPDATE_ROWS = {"added": "added (suggestable now)", "relabelled": "relabelled",
               "redirected": "redirected (evidence to the target)",
               "split": "split (not suggested; a librarian decides)",
               "deleted": "deleted (not suggested)",
               "announced": "announced, not yet effective",
               "unknown_skipped": "unknown ids skipped"}


def _print_update(done: dict) -> None:
    table = Table("change", "headings", "first ones")
    for kind, n in done["counts"].items():
        if kind == "redirected":
            first = ", ".join(f"{r['id']} → {r['target_label']} ({r['target']})"
                              for r in done["redirected"])
        elif kind == "split":
            first = ", ".join(f"{r['id']} {r['label']}" for r in done["split"])
        else:
            first = ", ".join(done.get("unknown" if kind == "unknown_skipped" else kind, []))
        table.add_row(UPDATE_ROWS[kind], str(n), first)
    out.print(table)


@vocab_app.command("update", short_help="Apply change files to a trained project without "
                   "retraining.")
def update(
    project: Path = typer.Argument(..., help="A trained project folder (served or not)."),
    changes: list[Path] = typer.Argument(..., help="Change files in the order they came (the GND-Änderungsdienst as MARC 21 or MARC-XML, gzipped or not; SKOS with owl:deprecated and dct:isReplacedBy), or one newer vocabulary (any format or a saved folder: compared whole)."),
    whole: bool = typer.Option(False, "--whole", help="CHANGES is a whole newer dump or release in MARC or SKOS: headings it lacks count as deleted."),
    entity_types: str = typer.Option(None, "--entity-types", help="GND MARC: the entity types to read, as for vocab load (default s)."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed records of the change files (named as warnings) instead of applying nothing."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; write nothing."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for another update or download into the folder."),
    as_json: bool = typer.Option(False, "--json", help="Print what was done and the project's vocabulary state as JSON."),
) -> None:
    """Apply change files to a trained project without retraining, atomically: new headings
    become suggestable at once (label index and lexical matcher), corrected labels take
    effect, redirected headings are never suggested again and their evidence counts for
    the target, deleted and split ones are never suggested. A served project picks the
    update up at its next reload. Files already applied change nothing.

    Example: tagalign vocab update gnd-hybrid/ GND_Aenderungsdienst_20240702.mrc.xml.gz
    """
    from tagalign.shipping.vocab_update import update_vocabulary

    report = InputReport()
    done = update_vocabulary(project, changes, whole=_compared_whole(changes, whole),
                             skip_bad=skip_bad, entity_types=entity_types, report=report,
                             option="--skip-bad", dry_run=dry_run, wait=wait)
    if report.n_skipped:
        console.print(f"[yellow]{report.n_skipped} malformed records skipped[/] (--skip-bad)")
    if as_json:
        print(json.dumps(done.to_dict(), ensure_ascii=False))
        return
    _print_update(done.to_dict())
    state = done.state
    if not done.written:
        console.print("nothing written: " + ("--dry-run" if dry_run else
                                             "these files were applied already"))
    else:
        console.print(f"{project}: vocabulary updated ({state['counts']['subjects']} "
                      f"headings, {state['counts']['suggestable']} suggestable; update "
                      f"{state['updates']}, last file {state['last_file']}); a server "
                      "serving it loads it at its next reload")
