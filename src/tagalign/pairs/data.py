"""Word-in-context pairs: the CoMeDi / DWUG folder layout and WiC-style JSONL.

CoMeDi (``{split}/<language>/{instances,labels,uses}.tsv``): ``uses.tsv`` holds
``identifier, lemma, context, indices_target_token`` (``start:end`` character offsets) with
standard CSV quoting (doubled inner quotes); ``instances.tsv`` names the pairs
(``identifier1, identifier2, lemma``); ``labels.tsv`` (optional: test data has none) adds
``median_cleaned`` on the ordinal scale 1 (unrelated) … 4 (identical).

WiC JSONL: ``{"sentence1", "sentence2", "start1", "end1", "start2", "end2", "label"}``. The
file's labels decide its scale: all 0/1 (or true/false) is binary WiC, mapped 0 → 2 and
1 → 4 (methods.md, R4); labels within 1 … 4 with one above 1 are graded and kept; any other
scale is refused, naming it.

Malformed lines are reported through `InputReport` as ``path:line`` and skipped.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from tagalign.errors import InputError, MissingFileError
from tagalign.io import PARSE_ERRORS, LineReader
from tagalign.records import InputReport

LABELS = (1, 2, 3, 4)
WIC_LABELS = {0: 2.0, 1: 4.0}


@dataclass(frozen=True)
class Use:
    """One usage of a target word: ``context[start:end]`` is the target."""

    identifier: str
    lemma: str
    context: str
    start: int
    end: int


@dataclass(frozen=True)
class Pair:
    """Two usages of one lemma; ``label`` on 1 … 4, or None when unlabelled."""

    use1: Use
    use2: Use
    lemma: str
    language: str
    label: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.use1.identifier, self.use2.identifier)


def _lines(path: Path, report: InputReport) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-blank lines, decoded line by line through
    `tagalign.io.LineReader`: an undecodable line is reported and skipped, not fatal."""
    reader = LineReader(path, report)
    n = 0
    for number, text in reader:
        if text.strip():
            n += 1
            yield number, text
    reader.finish(n, "lines")


def read_tsv(path: Path, columns: tuple[str, ...], report: InputReport
             ) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a headed TSV with standard CSV quoting, as (line number, {column: value})."""
    header: list[str] | None = None
    for number, text in _lines(path, report):
        try:
            fields = next(csv.reader([text], delimiter="\t", strict=True))
        except csv.Error as exc:
            report.bad(f"{path}:{number}", f"bad quoting ({exc})")
            continue
        if header is None:
            header = fields
            missing = [c for c in columns if c not in header]
            if missing:
                raise InputError(f"{path}:{number}: header lacks {', '.join(missing)}")
            continue
        if len(fields) != len(header):
            report.bad(f"{path}:{number}",
                       f"{len(fields)} fields, the header has {len(header)}")
            continue
        yield number, dict(zip(header, fields, strict=True))


def read_uses(path: Path, report: InputReport) -> dict[str, Use]:
    """``uses.tsv`` → {identifier: Use}; bad offsets are reported and the use dropped."""
    uses: dict[str, Use] = {}
    for number, row in read_tsv(path, ("identifier", "lemma", "context",
                                       "indices_target_token"), report):
        context = row["context"]
        try:
            start, end = (int(x) for x in row["indices_target_token"].split(":"))
        except ValueError:
            report.bad(f"{path}:{number}",
                       f"target offsets {row['indices_target_token']!r} are not start:end")
            continue
        if not 0 <= start < end <= len(context):
            report.bad(f"{path}:{number}", f"target offsets {start}:{end} fall outside the "
                       f"context ({len(context)} characters)")
            continue
        uses[row["identifier"]] = Use(row["identifier"], row["lemma"], context, start, end)
    return uses


def language_dirs(root: Path) -> list[Path]:
    """A split folder's language subfolders, or ``root`` itself when it is one language."""
    root = Path(root)
    if not root.is_dir():
        raise MissingFileError(f"{root}: no such folder", root)
    if (root / "instances.tsv").exists():
        return [root]
    found = sorted(p for p in root.iterdir() if (p / "instances.tsv").exists())
    if not found:
        raise MissingFileError(f"{root}: no <language>/instances.tsv below it "
                               "(expected the CoMeDi layout)", root)
    return found


def read_labels(folder: Path, report: InputReport) -> dict[tuple[str, str], float]:
    """``labels.tsv`` → {(identifier1, identifier2): median label}; {} when absent."""
    path = folder / "labels.tsv"
    if not path.exists():
        return {}
    out: dict[tuple[str, str], float] = {}
    for number, row in read_tsv(path, ("identifier1", "identifier2", "median_cleaned"), report):
        try:
            label = float(row["median_cleaned"])
        except ValueError:
            label = -1.0
        if not 1.0 <= label <= 4.0:
            report.bad(f"{path}:{number}", f"label {row['median_cleaned']!r} is not in 1..4")
            continue
        out[(row["identifier1"], row["identifier2"])] = label
    return out


def load_comedi(root: Path, report: InputReport | None = None) -> list[Pair]:
    """All pairs under a CoMeDi split folder (or one language folder), labelled when
    ``labels.tsv`` exists. Pairs whose uses are missing are reported and skipped."""
    report = report or InputReport()
    pairs: list[Pair] = []
    for folder in language_dirs(root):
        language = folder.name
        uses = read_uses(folder / "uses.tsv", report)
        labels = read_labels(folder, report)
        path = folder / "instances.tsv"
        for number, row in read_tsv(path, ("identifier1", "identifier2"), report):
            id1, id2 = row["identifier1"], row["identifier2"]
            absent = [i for i in (id1, id2) if i not in uses]
            if absent:
                report.bad(f"{path}:{number}", f"use {absent[0]} is not in uses.tsv "
                           "(missing or skipped)")
                continue
            u1, u2 = uses[id1], uses[id2]
            pairs.append(Pair(u1, u2, row.get("lemma") or u1.lemma, language,
                              labels.get((id1, id2)) if labels else None))
            report.records_read += 1
        if labels:
            unlabelled = sum(1 for p in pairs if p.language == language and p.label is None)
            if unlabelled:
                report.bad(str(folder / "labels.tsv"),
                           f"{unlabelled} pairs of instances.tsv have no label")
    return pairs


def load_wic_jsonl(path: Path, language: str = "wic", report: InputReport | None = None
                   ) -> list[Pair]:
    """WiC-style JSONL pairs: a binary file's labels 0 → 2, 1 → 4; a graded file's 1..4
    kept as they are (`wic_scale`); ValueError naming the scale for any other."""
    report = report or InputReport()
    path = Path(path)
    pairs: list[Pair] = []
    raw_labels: list[float | None] = []
    for number, text in _lines(path, report):
        where = f"{path}:{number}"
        try:
            obj = json.loads(text)
            s1, s2 = str(obj["sentence1"]), str(obj["sentence2"])
            spans = [int(obj[k]) for k in ("start1", "end1", "start2", "end2")]
        except PARSE_ERRORS as exc:  # arbitrary JSON: deep nesting, Infinity offsets, ...
            report.bad(where, f"not a WiC pair ({type(exc).__name__}: {exc})")
            continue
        if not (0 <= spans[0] < spans[1] <= len(s1) and 0 <= spans[2] < spans[3] <= len(s2)):
            report.bad(where, "target offsets fall outside the sentence")
            continue
        raw = obj.get("label")
        if raw is not None and (not isinstance(raw, (int, float)) or not math.isfinite(raw)):
            report.bad(where, f"label {raw!r} is not a number")
            continue
        ident = str(obj.get("id", number))
        lemma = str(obj.get("lemma", s1[spans[0]:spans[1]]))
        pairs.append(Pair(Use(f"{ident}-1", lemma, s1, spans[0], spans[1]),
                          Use(f"{ident}-2", lemma, s2, spans[2], spans[3]),
                          lemma, str(obj.get("language", language))))
        raw_labels.append(None if raw is None else float(raw))
        report.records_read += 1
    if wic_scale([x for x in raw_labels if x is not None], path) == "binary":
        raw_labels = [None if x is None else WIC_LABELS[int(x)] for x in raw_labels]
    return [replace(p, label=x) for p, x in zip(pairs, raw_labels, strict=True)]


def wic_scale(labels: list[float], path: Path | str = "WiC file") -> str:
    """``binary`` when every label is 0 or 1, ``graded`` when all lie in 1..4 (so a graded
    1 is not read as binary "same"), ``none`` without labels; ValueError naming the scale
    of any other file."""
    if not labels:
        return "none"
    values = set(labels)
    if values <= {0.0, 1.0}:
        return "binary"
    if all(1.0 <= x <= 4.0 for x in values):
        return "graded"
    shown = ", ".join(f"{x:g}" for x in sorted(values)[:8]) + (", ..." if len(values) > 8 else "")
    raise InputError(f"{path}: labels on a scale of {min(values):g}..{max(values):g} "
                     f"({shown}) are neither binary 0/1 (mapped to 2/4) nor graded 1..4")


def load_pairs(source: Path, report: InputReport | None = None) -> list[Pair]:
    """A CoMeDi folder or a WiC ``.jsonl`` file."""
    source = Path(source)
    if source.is_file():
        return load_wic_jsonl(source, report=report)
    return load_comedi(source, report)
