"""Labelled texts for multi-label classification, from any record source or plain JSONL.

A source is either anything `tagalign.records.read_records` reads (labels from a record
field, default ``domains``: the LinSearch domains of LLMs4Subjects) or JSONL(.gz) with
``{"id", "text", "labels", "lang"?}`` per line for other multi-label tasks. A training
example without labels is reported (``path:line`` or ``path: record ID``) and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tagalign.errors import InputError, MissingFileError
from tagalign.io import open_text, parse_lines
from tagalign.records import InputReport, read_records


@dataclass(slots=True)
class Example:
    """One text to classify and, for training/evaluation, its gold labels."""

    id: str
    text: str
    labels: list[str] = field(default_factory=list)
    language: str | None = None
    #: the text already tokenised by the project's `Analyzer` (the hybrid tagger has them);
    #: the `linear` recipe then skips tokenising
    tokens: list[str] | None = None
    #: gold subject ids (records read from a record source): `subjects-stack` counts its
    #: subject → domain profiles on them
    subjects: list[str] | None = None
    #: a subject project's suggestions for the record, (subject id, score) best first:
    #: the input `subjects-stack` reads beside the text (filled by `tagalign.project.domains`)
    suggested: list[tuple[str, float]] | None = None
    #: the subject project's neighbour records of this record by source name, (record id,
    #: similarity) nearest first: `subjects-stack` reads their gold domains
    neighbours: dict[str, list[tuple[str, float]]] | None = None


def is_text_jsonl(path: Path) -> bool:
    """True when the first non-empty line of a JSONL file carries ``text`` (the plain form)."""
    name = path.name.lower().removesuffix(".gz")
    if path.is_dir() or not name.endswith((".jsonl", ".ndjson")):
        return False
    with open_text(path) as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(obj, dict) and "text" in obj and "title" not in obj
    return False


def _read_text_jsonl(path: Path, report: InputReport) -> Iterator[tuple[str, Example]]:
    def parse(line: str, lineno: int) -> tuple[str, Example] | None:
        if not line.strip():
            return None
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        text, labels = obj.get("text"), obj.get("labels") or []
        if not isinstance(text, str) or not text.strip():
            raise ValueError("missing 'text'")
        if isinstance(labels, str):
            labels = [labels]
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ValueError("'labels' is not a list of strings")
        rid = str(obj.get("id") or f"{path.name}:{lineno}")
        lang = obj.get("lang") or obj.get("language")
        return f"{path}:{lineno}", Example(rid, text, list(labels), lang)

    yield from parse_lines(path, report, parse)


def _read_record_source(path: Path, report: InputReport, label_field: str
                        ) -> Iterator[tuple[str, Example]]:
    for rec in read_records(path, report=report):
        labels = getattr(rec, label_field, None)
        if labels is None:
            raise InputError(f"records have no field {label_field!r}; use 'domains' or "
                             "'subjects', or JSONL with 'text' and 'labels'")
        yield f"{path}: record {rec.id}", Example(rec.id, rec.text, list(labels), rec.language,
                                                  subjects=list(rec.subjects))


def read_examples(path: Path | str, *, label_field: str = "domains",
                  report: InputReport | None = None, require_labels: bool = False,
                  limit: int | None = None) -> list[Example]:
    """Examples from ``path``; with ``require_labels`` one without labels is reported and
    skipped (training), otherwise kept (prediction input)."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"input not found: {path}", path)
    report = report if report is not None else InputReport()
    rows = (_read_text_jsonl(path, report) if is_text_jsonl(path)
            else _read_record_source(path, report, label_field))
    out: list[Example] = []
    for where, ex in rows:
        if require_labels and not ex.labels:
            report.bad(where, "no labels; skipped for training")
            continue
        out.append(ex)
        if limit is not None and len(out) >= limit:
            break
    return out


class LabelSet:
    """The ordered label set of a classifier: label ↔ column, multi-hot matrices."""

    def __init__(self, labels: Sequence[str]):
        self.labels = list(dict.fromkeys(labels))
        self.index = {lab: i for i, lab in enumerate(self.labels)}

    @classmethod
    def from_examples(cls, examples: Sequence[Example]) -> LabelSet:
        return cls(sorted({lab for ex in examples for lab in ex.labels}))

    def __len__(self) -> int:
        return len(self.labels)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelSet) and self.labels == other.labels

    def matrix(self, examples: Sequence[Example], report: InputReport | None = None
               ) -> np.ndarray:
        """(n, |labels|) 0/1 float32; labels outside the set are reported and ignored."""
        y = np.zeros((len(examples), len(self.labels)), np.float32)
        for i, ex in enumerate(examples):
            for lab in ex.labels:
                j = self.index.get(lab)
                if j is None:
                    if report is not None:
                        report.bad(f"record {ex.id}", f"label {lab!r} not in the label set")
                    continue
                y[i, j] = 1.0
        return y
