"""Convert any record source (e.g. the official JSON-LD tree) to our JSONL(.gz) format."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tagalign.records.record import Record


def write_jsonl(path: Path, records: Iterable[Record], split: str | None = None) -> int:
    """Write records atomically as JSONL (gzip when the name ends in ``.gz``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    n = 0
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(tmp, "wt", encoding="utf-8") as fh:
            for rec in records:
                obj = rec.to_json()
                if split:
                    obj["split"] = split
                fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n
