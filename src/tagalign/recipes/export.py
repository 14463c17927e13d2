"""Exports like the LLMs4Subjects preparation scripts (R3's data, for training elsewhere):
the subject "vector database" of a trained dense recipe and the train/dev pairs, as CSV or
JSONL (chosen by the file name; ``.gz`` compresses).

The original scripts wrote one CSV per language: subjects with their name, and records
with ``title``, ``abstract`` and ``Subject Names`` (the gold labels joined by ";"), which
the training scripts read back. Ours keep those fields (``subject_names``) and add the ids,
so a row can be joined back to the vocabulary; list-valued cells are JSON in CSV."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.errors import InputError
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
        raise InputError(f"{path}: export to .csv or .jsonl (optionally .gz)")
    data = buf.getvalue().encode("utf-8")
    write_bytes_atomic(path, gzip.compress(data) if path.suffix == ".gz" else data)
    return n


def export_subject_vectors(path: Path, vocab, positions: np.ndarray, vectors: np.ndarray,
                           language: str = "de") -> int:
    """One row per subject: id, label, vector (the index's transformed vectors)."""
    rows = ([vocab.subjects[int(p)].id, vocab.subjects[int(p)].label(language),
             [round(float(x), 6) for x in v]] for p, v in zip(positions, vectors, strict=True))
    return _write_rows(path, ["id", "label", "vector"], rows)


def export_pairs(path: Path, records: Sequence[Record], vocab, language: str | None = "de"
                 ) -> int:
    """One row per record: id, language, title, abstract, text (title + " " + abstract),
    gold subject ids, their labels and those labels joined by "; " (the original's
    ``Subject Names``). Labels are in ``language`` (German where missing); ``None`` uses
    each record's own language, as the original's per-language files did."""
    def labels(r: Record) -> list[str]:
        return [vocab.label(s, language or r.language) for s in r.subjects]

    rows = ([r.id, r.language, r.title, r.abstract, r.text, list(r.subjects), labels(r),
             "; ".join(labels(r))] for r in records)
    return _write_rows(path, ["id", "language", "title", "abstract", "text", "subject_ids",
                              "subject_labels", "subject_names"], rows)


def subject_index_of(recipe: Any, model: str | None = None):
    """(subject positions, VectorIndex, label language) of a dense recipe."""
    models = getattr(recipe, "models_", None)
    if models:
        key = model or next(iter(models))
        if key not in models:
            raise InputError(f"no model {key!r}; this project has {sorted(models)}")
        return recipe.positions_, models[key][1], "de" if key == "all" else key
    if getattr(recipe, "index_", None) is None:
        raise InputError(f"recipe {recipe.name!r} has no subject vector index to export")
    return recipe.positions_, recipe.index_, recipe.config.subject_language  # a DenseRecipe
