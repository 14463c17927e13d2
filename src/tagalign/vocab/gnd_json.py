"""The LLMs4Subjects GND JSON: a list of ``{Code, Name, Alternate Name, Related Subjects,
Classification Number, Classification Name, Definition}`` objects (German labels)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from tagalign.vocab.loaders import open_text, register
from tagalign.vocab.subject import Subject, normalize_subject_id


def _list(value: object) -> list:
    if value is None or value == "":
        return []
    return value if isinstance(value, list) else [value]


def _related_id(item: object) -> str | None:
    if isinstance(item, str):
        return normalize_subject_id(item)
    if isinstance(item, dict):
        code = item.get("Code") or item.get("code") or item.get("@id") or item.get("id")
        return normalize_subject_id(str(code)) if code else None
    return None


@register("gnd-json")
def load_gnd_json(path: Path, language: str = "de") -> Iterator[Subject]:
    with open_text(path) as fh:
        data = json.load(fh)
    if isinstance(data, dict):  # some dumps wrap the list
        data = next((v for v in data.values() if isinstance(v, list)), [])
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not item.get("Code") or not item.get("Name"):
            raise ValueError(f"{path}: entry {i} lacks 'Code' or 'Name'")
        numbers = _list(item.get("Classification Number"))
        names = _list(item.get("Classification Name"))
        yield Subject(
            id=normalize_subject_id(str(item["Code"])),
            labels={language: str(item["Name"])},
            alt_labels={language: [str(a) for a in _list(item.get("Alternate Name")) if a]},
            related=[r for r in map(_related_id, _list(item.get("Related Subjects"))) if r],
            classification=[(str(n), str(m)) for n, m in zip(numbers, names + [""] * len(
                numbers), strict=False)],
            definition=(str(item["Definition"]) if item.get("Definition") else None),
        )
