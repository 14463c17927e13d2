"""The shared task's submission layout: one ``{Type}/{lang}/{id}.json`` per record.

Each file holds ``{"dcterms:subject": ["gnd:4015065-3", ...]}`` best first, as the
LLMs4Subjects submissions list GND subjects by their ``gnd:`` ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tagalign.io import write_bytes_atomic
from tagalign.records import Record


def write_submission(out_dir: Path | str, records: Iterable[Record],
                     predictions: Mapping[str, Sequence[str]], limit: int = 50) -> int:
    out_dir = Path(out_dir)
    n = 0
    for rec in records:
        ids = list(dict.fromkeys(predictions.get(rec.id, [])))[:limit]
        path = out_dir / (rec.type or "unknown") / (rec.language or "unknown") / f"{rec.id}.json"
        body = {"dcterms:subject": [f"gnd:{sid}" for sid in ids]}
        write_bytes_atomic(path, json.dumps(body, ensure_ascii=False, indent=1).encode())
        n += 1
    return n
