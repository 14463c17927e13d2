"""Convert any record source (e.g. the official JSON-LD tree) to our JSONL(.gz) format."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from tagalign.io import InputReport, atomic_text
from tagalign.records.loaders import read_records
from tagalign.records.record import Record

log = logging.getLogger(__name__)


def write_jsonl(path: Path, records: Iterable[Record], split: str | None = None) -> int:
    """Write records atomically as JSONL (gzip when the name ends in ``.gz``)."""
    n = 0
    with atomic_text(Path(path)) as fh:
        for rec in records:
            obj = rec.to_json()
            if split:
                obj["split"] = split
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
    return n


def convert_tree(root: Path, out: Path) -> dict[str, int]:
    """Every ``{split}`` folder holding ``{Type}/{lang}/*.jsonld`` → ``out/{split}.jsonl.gz``."""
    counts: dict[str, int] = {}
    for split_dir in sorted({p.parents[2] for p in root.rglob("*.jsonld")}):
        name = split_dir.name
        report = InputReport()
        counts[name] = write_jsonl(out / f"{name}.jsonl.gz", read_records(split_dir,
                                                                          report=report), name)
        if (summary := report.end_summary()) is not None:
            log.warning(summary)
    return counts
