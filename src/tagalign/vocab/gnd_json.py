"""The LLMs4Subjects GND JSON: a list of ``{Code, Name, Alternate Name, Related Subjects,
Classification Number, Classification Name, Definition}`` objects (German labels)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from tagalign.io import PARSE_ERRORS, Reporter, describe_error, read_text_lenient
from tagalign.vocab.loaders import default_report, register
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


def _subject(item: object, language: str) -> Subject:
    if not isinstance(item, dict) or not item.get("Code") or not item.get("Name"):
        raise ValueError("entry lacks 'Code' or 'Name'")
    numbers = _list(item.get("Classification Number"))
    names = _list(item.get("Classification Name"))
    return Subject(
        id=normalize_subject_id(str(item["Code"])),
        labels={language: str(item["Name"])},
        alt_labels={language: [str(a) for a in _list(item.get("Alternate Name")) if a]},
        related=[r for r in map(_related_id, _list(item.get("Related Subjects"))) if r],
        classification=[(str(n), str(m)) for n, m in zip(numbers, names + [""] * len(
            numbers), strict=False)],
        definition=(str(item["Definition"]) if item.get("Definition") else None),
    )


def _entries(text: str) -> Iterator[tuple[int, object | ValueError]]:
    """``(line, entry)`` for each element of the top-level list, scanned one at a time, so a
    broken entry (a bad byte, a cut) costs that entry only: after a syntax error the scan
    goes on at the next line that opens an object at the indentation of the entries. A
    failed element comes out as ``(line, ValueError)``."""
    dec = json.JSONDecoder()
    start = text.find("[")
    if start < 0:
        raise ValueError("expected a JSON list of subjects")
    pos, n = start + 1, len(text)
    indent: str | None = None
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] == "]":
            return
        line = text.count("\n", 0, pos) + 1
        if indent is None:
            indent = text[text.rfind("\n", 0, pos) + 1:pos]
        try:
            obj, pos = dec.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            yield line, ValueError(describe_error(exc))
            nxt = text.find("\n" + indent + "{", pos + 1) if indent.strip() == "" else -1
            if nxt < 0:
                return
            pos = nxt + 1
            continue
        yield line, obj


@register("gnd-json")
def load_gnd_json(path: Path, language: str = "de", report: Reporter | None = None
                  ) -> Iterator[Subject]:
    """Decoded per line (undecodable lines reported), parsed entry by entry (see `_entries`)."""
    report = default_report(report)
    text, reader = read_text_lenient(path, report)
    n = 0
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None  # damaged: recover entry by entry below
    if isinstance(data, dict):  # some dumps wrap the list
        data = next((v for v in data.values() if isinstance(v, list)), [])
    if isinstance(data, list):
        items: Iterable[tuple[str, object]] = (
            (f"{path}: entry {i + 1}", item) for i, item in enumerate(data))
    else:
        try:
            entries = list(_entries(text))
        except ValueError as exc:
            report.bad(str(path), str(exc))
            entries = []
        items = ((f"{path}:{line}", item) for line, item in entries)
    for where, item in items:
        try:
            if isinstance(item, ValueError):  # an entry `_entries` could not decode
                raise item
            subject = _subject(item, language)
        except PARSE_ERRORS as exc:
            report.bad(where, describe_error(exc))
            continue
        n += 1
        yield subject
    reader.finish(n, "subjects")
