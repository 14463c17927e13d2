"""Prediction files: JSONL (``.gz`` allowed), one line per record, best subject first.

``{"id": "...", "subjects": [{"id": "4015065-3", "label": "Epos", "score": 0.83}, ...]}``;
a plain list of ids (``"subjects": ["4015065-3", ...]``) is accepted too. Subject ids are
normalised (``gnd:…`` and ``https://d-nb.info/gnd/…`` become the bare GND id). The order
of the list is the ranking; scores are kept for people, not re-sorted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tagalign.io import InputReport, atomic_text, parse_lines
from tagalign.suggest import Quality, Suggestion
from tagalign.vocab import normalize_subject_id

T = TypeVar("T")


def _ids(subjects: object) -> list[str]:
    if not isinstance(subjects, list):
        raise ValueError("'subjects' is not a list")
    out = []
    for s in subjects:
        if isinstance(s, str):
            out.append(normalize_subject_id(s))
        elif isinstance(s, dict) and isinstance(s.get("id"), str):
            out.append(normalize_subject_id(s["id"]))
        else:
            raise ValueError(f"bad subject entry {s!r}: expected an id or {{'id': ...}}")
    return out


def _scored(subjects: Any) -> list[tuple[str, float | None]]:
    """Like `_ids`, with each subject's ``score`` (None when absent or not a number)."""
    ids = _ids(subjects)
    scores = [s.get("score") if isinstance(s, dict) else None for s in subjects]
    return [(sid, float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None)
            for sid, x in zip(ids, scores, strict=True)]


def object_with_id(line: str) -> dict | None:
    """One prediction line's JSON object (None for a blank line); raises without an id."""
    if not line.strip():
        return None
    obj = json.loads(line)
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise ValueError("expected an object with an 'id'")
    return obj


def label_scores(labels: Sequence[tuple[str, float]]) -> list[dict]:
    """``[{"label", "score"}]``: the one JSON shape of scored labels (`classify predict`'s
    lines, the domains beside suggested subjects)."""
    return [{"label": label, "score": round(float(score), 4)} for label, score in labels]


def subjects_object(rid: str, suggestions: Iterable[Suggestion],
                    quality: Quality | None = None,
                    domains: Sequence[tuple[str, float]] | None = None) -> dict:
    """``{"id", "subjects", "quality"?, "domains"?}``; ``domains`` in the shape of
    `labels_line`'s labels (``[{"label", "score"}]``)."""
    obj: dict = {"id": rid, "subjects": [s.to_json() for s in suggestions]}
    if quality is not None:
        obj["quality"] = quality.to_json()
    if domains is not None:
        obj["domains"] = label_scores(domains)
    return obj


def subjects_line(rid: str, suggestions: Iterable[Suggestion],
                  quality: Quality | None = None,
                  domains: Sequence[tuple[str, float]] | None = None) -> str:
    """`subjects_object` as one JSONL line."""
    return json.dumps(subjects_object(rid, suggestions, quality, domains),
                      ensure_ascii=False) + "\n"


def _quality(obj: dict) -> float | None:
    q = obj.get("quality")
    if q is None:
        return None
    if not isinstance(q, dict) or not isinstance(q.get("recall"), int | float):
        raise ValueError(f"bad quality {q!r}: expected {{'recall': number, ...}} or null")
    return float(q["recall"])


def read_estimates(path: Path | str, report: InputReport | None = None
                   ) -> tuple[dict[str, list[str]], dict[str, float | None]]:
    """Rankings and estimated recall (``quality.recall``; None where a line has none) per
    record id, from one pass over a predictions JSONL (bad lines as in `read_rows_by_id`)."""
    estimates: dict[str, float | None] = {}

    def row(obj: dict) -> list[str]:
        ids, estimates[obj["id"]] = _ids(obj.get("subjects", [])), _quality(obj)
        return ids

    return read_rows_by_id(path, report, row), estimates


def read_rows_by_id(path: Path | str, report: InputReport | None,
                    row: Callable[[dict], list[T]]) -> dict[str, list[T]]:
    """``{record id: row(object)}`` for a predictions JSONL, one object per line.

    Malformed lines (bad bytes, bad JSON, no ``id``, a row ``row`` rejects, a record id seen
    before) go to ``report`` as ``path:line``: skipped by default (the first of a repeated id
    wins), a `BadInputError` when the report is strict.
    """
    report = report if report is not None else InputReport()
    out: dict[str, list[T]] = {}

    def parse(line: str, lineno: int) -> str | None:
        obj = object_with_id(line)
        if obj is None:
            return None
        if obj["id"] in out:
            raise ValueError(f"record id {obj['id']!r} predicted again")
        out[obj["id"]] = row(obj)
        return obj["id"]

    for _ in parse_lines(Path(path), report, parse, unit="predictions"):
        pass
    return out


def read_predictions(path: Path | str, report: InputReport | None = None
                     ) -> dict[str, list[str]]:
    """``{record id: [subject ids best first]}`` (see `read_rows_by_id` for bad lines)."""
    return read_rows_by_id(path, report, lambda obj: _ids(obj.get("subjects", [])))


def read_scored_predictions(path: Path | str, report: InputReport | None = None
                            ) -> dict[str, list[tuple[str, float | None]]]:
    """``{record id: [(subject id, score or None), ...] best first}`` (Annif's metrics
    apply a threshold to the scores); bad lines as in `read_rows_by_id`."""
    return read_rows_by_id(path, report, lambda obj: _scored(obj.get("subjects", [])))


def write_predictions(path: Path | str, rows: Iterable[tuple[str, list[Suggestion]]]) -> int:
    """Write predictions atomically (``.gz`` compresses); returns the number of records."""
    n = 0
    with atomic_text(Path(path)) as fh:
        for rid, suggestions in rows:
            fh.write(subjects_line(rid, suggestions))
            n += 1
    return n
