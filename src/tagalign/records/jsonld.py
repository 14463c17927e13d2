"""The official LLMs4Subjects JSON-LD layout: ``{split}/{Type}/{lang}/{id}.jsonld``.

The record is the ``@graph`` node with a title; its gold subjects are the ``@id``s under
``dcterms:subject``. A malformed file is reported and skipped, never fatal by default.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from tagalign.io import PARSE_ERRORS, InputReport, LineError, decode_utf8, describe_error
from tagalign.records.loaders import register
from tagalign.records.record import Record
from tagalign.vocab.subject import normalize_subject_id

TYPES = {"Article", "Book", "Conference", "Report", "Thesis"}
LINSEARCH = "(classificationName=linsearch:mapping)"  # the record's subject domains


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(_text(v) for v in value)
    if isinstance(value, dict):
        return _text(value.get("@value"))
    return str(value)


def _as_list(value: object) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def parse_jsonld(path: Path) -> Record:
    """One record from one ``.jsonld`` file (raises ValueError when malformed)."""
    doc = json.loads(decode_utf8(path.read_bytes()))
    nodes = doc.get("@graph", [doc]) if isinstance(doc, dict) else []
    node = next((n for n in nodes if isinstance(n, dict) and "title" in n), None)
    if node is None:
        raise ValueError("no record node with a title in @graph")
    subjects = []
    for s in _as_list(node.get("dcterms:subject")):
        sid = s.get("@id") if isinstance(s, dict) else s
        if isinstance(sid, str):
            subjects.append(normalize_subject_id(sid))
    parts = path.parts
    rtype = parts[-3] if len(parts) >= 3 and parts[-3] in TYPES else None
    if rtype is None:
        kinds = [t.split(":")[-1] for t in _as_list(node.get("@type")) if isinstance(t, str)]
        rtype = next((k for k in kinds if k in TYPES), kinds[0] if kinds else None)
    lang = parts[-2] if len(parts) >= 2 and parts[-2] in ("de", "en") else None
    if lang is None:
        lang = _text(node.get("language")).rstrip("/").rsplit("/", 1)[-1] or None
    domains = [s.split(")", 1)[1].strip() for s in _as_list(node.get("subject"))
               if isinstance(s, str) and s.startswith(LINSEARCH)]
    return Record(id=path.stem, title=_text(node.get("title")),
                  abstract=_text(node.get("abstract")), language=lang, type=rtype,
                  subjects=list(dict.fromkeys(subjects)), domains=domains)


@register("jsonld")
def read_jsonld(path: Path, report: InputReport) -> Iterator[Record]:
    """A directory tree of ``.jsonld`` files (sorted, streamed) or one file."""
    files = [path] if path.is_file() else sorted(path.rglob("*.jsonld"))
    for file in files:  # one bad file never stops the tree
        try:
            rec = parse_jsonld(file)
        except json.JSONDecodeError as exc:
            report.bad(f"{file}:{exc.lineno}", exc.msg)
            continue
        except LineError as exc:
            report.bad(f"{file}:{exc.lineno}", str(exc))
            continue
        except (OSError,) + PARSE_ERRORS as exc:
            report.bad(str(file), describe_error(exc))
            continue
        yield rec
