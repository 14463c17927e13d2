"""The shared task's submission layout: one ``{Type}/{lang}/{id}.json`` per record.

As in the task's ``submission-format/`` example and read by its evaluation script
(``shared-task-eval-script/llms4subjects-evaluation.py`` in the LLMs4Subjects repository),
each file holds ``{"dcterms:subject": ["gnd:4015065-3", ...]}``, best first: the script
compares these strings with the gold ``@id`` values, which carry the ``gnd:`` prefix. The
file is named like the record's ``.jsonld`` file with ``.json`` instead. The task asks for
the top 20 per record; we write up to ``limit`` (50, the SemEval-2025 maximum).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tagalign.io import PARSE_ERRORS, LineError, decode_utf8, describe_error, write_bytes_atomic
from tagalign.records import InputReport, Record
from tagalign.vocab import normalize_subject_id

UNKNOWN = "unknown"


def write_submission(out_dir: Path | str, records: Iterable[Record],
                     predictions: Mapping[str, Sequence[str]], limit: int = 50) -> int:
    """Write one file per record (an empty list where there is no prediction)."""
    out_dir = Path(out_dir)
    n = 0
    for rec in records:
        ids = list(dict.fromkeys(predictions.get(rec.id, ())))[:limit]
        path = out_dir / (rec.type or UNKNOWN) / (rec.language or UNKNOWN) / f"{rec.id}.json"
        body = {"dcterms:subject": [f"gnd:{sid}" for sid in ids]}
        write_bytes_atomic(path, json.dumps(body, ensure_ascii=False, indent=1).encode())
        n += 1
    return n


def read_submission(sub_dir: Path | str, report: InputReport | None = None
                    ) -> dict[str, list[str]]:
    """``{record id: [subject ids best first]}`` from a submission folder (any depth).

    The record id is the file name without ``.json``; a file that is not JSON or has no
    ``dcterms:subject`` list goes to ``report`` (skipped, or an error when strict).
    """
    report = report if report is not None else InputReport()
    out: dict[str, list[str]] = {}
    for path in sorted(Path(sub_dir).rglob("*.json")):
        try:
            body = json.loads(decode_utf8(path.read_bytes()))
            ids = body.get("dcterms:subject") if isinstance(body, dict) else None
            if not isinstance(ids, list) or not all(isinstance(s, str) for s in ids):
                raise ValueError("expected {\"dcterms:subject\": [\"gnd:...\", ...]}")
            if path.stem in out:
                raise ValueError(f"record id {path.stem!r} predicted again")
            out[path.stem] = [normalize_subject_id(s) for s in ids]
        except LineError as exc:
            report.bad(f"{path}:{exc.lineno}", str(exc))
        except (OSError,) + PARSE_ERRORS as exc:
            report.bad(str(path), describe_error(exc))
    return out
