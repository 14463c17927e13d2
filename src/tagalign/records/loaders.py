"""Streaming record loaders, one per source format, behind a small registry.

``read_records(path)`` yields `Record`s one at a time, so a million records never sit
in memory at once. Malformed lines/files go to an `InputReport` (path and line number).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from tagalign.errors import InputError, MissingFileError
from tagalign.io import InputReport, open_binary, parse_lines
from tagalign.records.marc.provenance import Provenance
from tagalign.records.record import Record
from tagalign.registry import Registry
from tagalign.vocab.subject import normalize_subject_id

Reader = Callable[[Path, InputReport], Iterator[Record]]
#: Record formats by name; those in their own modules are imported on first lookup (the
#: module registers its reader), as `tagalign.recipes.RECIPES` does for recipes.
RECORD_FORMATS: Registry[Reader] = Registry("record format", choose="known:", lazy={
    "annif-tsv": "tagalign.records.annif",
    "jsonld": "tagalign.records.jsonld",
    "marc": "tagalign.records.marc.reader",
})
register = RECORD_FORMATS.register_as  # @register("jsonl") def read_jsonl(path, report)


def _strs(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError(f"expected a list of strings, got {type(value).__name__}")


def record_from_json(obj: object) -> Record:
    """One record from a decoded JSON object (raises ValueError/TypeError when malformed)."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    rid = obj.get("id")
    title = obj.get("title")
    if not rid or not isinstance(rid, str):
        raise ValueError("missing 'id'")
    if not isinstance(title, str):
        raise ValueError("missing 'title'")
    abstract = obj.get("abstract") or ""
    if not isinstance(abstract, str):
        raise ValueError("'abstract' is not a string")
    language = obj.get("lang") or obj.get("language")
    rtype = obj.get("type")
    return Record(
        id=rid,
        title=title,
        abstract=abstract,
        language=language if isinstance(language, str) else None,
        type=rtype if isinstance(rtype, str) else None,
        subjects=[normalize_subject_id(s) for s in _strs(obj.get("subjects"))],
        domains=[sys.intern(d) for d in _strs(obj.get("domains"))],
        genres=[normalize_subject_id(s) for s in _strs(obj.get("genres"))],
        machine_subjects=[normalize_subject_id(s) for s in _strs(obj.get("machine_subjects"))],
        confirmed_subjects=[normalize_subject_id(s)
                            for s in _strs(obj.get("confirmed_subjects"))],
    )


def _jsonl_line(text: str, lineno: int) -> Record | None:
    return record_from_json(json.loads(text)) if text.strip() else None


@register("jsonl")
def read_jsonl(path: Path, report: InputReport) -> Iterator[Record]:
    """Our JSONL(.gz): ``{"id", "type", "lang", "title", "abstract", "subjects", "domains"}``.

    Decoded per line (`tagalign.io.parse_lines`): bad bytes, bad JSON or a non-record cost
    that line only, and a cut-off ``.gz`` still yields the records before the cut.
    """
    return parse_lines(path, report, _jsonl_line)


#: file name endings of MARC files (binary or MARC-XML; ``.gz`` after any of them too)
MARC_SUFFIXES = (".mrc", ".marc", ".iso2709", ".marcxml", ".xml")


def guess_format(path: Path) -> str:
    """The record format of ``path``: by its name, else by its first bytes (MARC, JSONL)."""
    path = Path(path)
    if path.is_dir():
        return "jsonld"
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".jsonld"):
        return "jsonld"
    if name.endswith((".tsv", ".txt")):
        return "annif-tsv"
    if name.endswith(MARC_SUFFIXES):
        return "marc"
    return _sniff(path)


def _sniff(path: Path) -> str:
    from tagalign.records.marc.reader import sniff_marc

    try:
        with open_binary(path) as fh:
            head = fh.read(64)
    except (OSError, EOFError):
        head = b""
    if sniff_marc(head) is not None:
        return "marc"
    if head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"{"):
        return "jsonl"
    raise InputError(f"{path}: cannot tell the record format from its name or its first "
                     f"bytes; pass format= one of {RECORD_FORMATS.names()}")


#: the lists of a `Record` that join ``subjects`` as gold, by the least trusted kind asked for
_GOLD_ADDS: dict[Provenance, tuple[str, ...]] = {
    Provenance.INTELLECTUAL: (),
    Provenance.CONFIRMED: ("confirmed_subjects",),
    Provenance.MACHINE: ("confirmed_subjects", "machine_subjects"),
}


def read_records(
    path: Path | str,
    *,
    format: str | None = None,
    report: InputReport | None = None,
    vocab=None,
    limit: int | None = None,
    gold: Provenance | str = Provenance.INTELLECTUAL,
    processes: bool = False,
) -> Iterator[Record]:
    """Stream records from ``path``; with ``vocab``, gold ids not in it are dropped and counted.

    ``gold``: the least trusted kind of subject that counts as gold (MARC records say how
    each got there, `tagalign.records.marc.provenance`): ``intellectual`` (the default)
    keeps ``subjects``, those a person chose; ``confirmed`` adds ``confirmed_subjects``,
    machine suggestions a librarian accepted; ``machine`` adds ``machine_subjects`` too.
    ``processes``: keep `Record.processes` (each marked subject's 883, for ``records
    stats``); by default it is dropped, so a million records in memory hold no such dicts.
    """
    widen = _GOLD_ADDS[Provenance(gold)]
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"records not found: {path}", path)
    report = report if report is not None else InputReport()
    fmt = format or guess_format(path)
    for n, rec in enumerate(RECORD_FORMATS.lookup(fmt)(path, report)):
        if limit is not None and n >= limit:
            break
        if not processes:
            rec.processes = None
        extra = [s for attr in widen for s in getattr(rec, attr)]
        if extra:
            rec.subjects = list(dict.fromkeys(rec.subjects + extra))
        if vocab is not None and rec.subjects:
            kept = []
            for s in rec.subjects:
                if s in vocab:
                    kept.append(s)
                else:
                    report.missing(s)
            rec.subjects = kept
        report.records_read += 1
        yield rec
