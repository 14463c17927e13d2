"""Exports like the LLMs4Subjects preparation scripts: the subject "vector database" and
the train/dev pairs, as CSV or JSONL (chosen by the file name)."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from tagalign.io import write_bytes_atomic
from tagalign.records import Record


def _write_rows(path: Path, header: list[str], rows: Iterable[list]) -> int:
    path = Path(path)
    name = path.name.removesuffix(".gz")
    buf = io.StringIO()
    n = 0
    if name.endswith(".csv"):
        writer = csv.writer(buf)
        writer.writerow(header)
        for row in rows:
            writer.writerow([json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v
                             for v in row])
            n += 1
    elif name.endswith((".jsonl", ".ndjson")):
        for row in rows:
            buf.write(json.dumps(dict(zip(header, row, strict=True)), ensure_ascii=False) + "\n")
            n += 1
    else:
        raise ValueError(f"{path}: export to .csv or .jsonl (optionally .gz)")
    data = buf.getvalue().encode("utf-8")
    write_bytes_atomic(path, gzip.compress(data) if path.suffix == ".gz" else data)
    return n


def export_subject_vectors(path: Path, vocab, positions: np.ndarray, vectors: np.ndarray,
                           language: str = "de") -> int:
    """One row per subject: id, label, vector (the index's transformed vectors)."""
    rows = ([vocab.subjects[int(p)].id, vocab.subjects[int(p)].label(language),
             [round(float(x), 6) for x in v]] for p, v in zip(positions, vectors, strict=True))
    return _write_rows(path, ["id", "label", "vector"], rows)


def export_pairs(path: Path, records: Sequence[Record], vocab) -> int:
    """One row per record: id, language, text, gold subject ids and their labels."""
    rows = ([r.id, r.language, r.text, list(r.subjects),
             [vocab.label(s, "de") for s in r.subjects]] for r in records)
    return _write_rows(path, ["id", "language", "text", "subject_ids", "subject_labels"], rows)
