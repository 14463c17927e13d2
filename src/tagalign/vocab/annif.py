"""Annif subject TSV: ``<uri>\\tlabel`` (optionally ``\\tnotation``) per line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tagalign.vocab.loaders import open_text, register
from tagalign.vocab.subject import Subject, normalize_subject_id


@register("annif-tsv")
def load_annif_tsv(path: Path, language: str = "de") -> Iterator[Subject]:
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < 2 or not parts[1].strip():
                raise ValueError(f"{path}:{lineno}: expected '<uri>\\tlabel'")
            notation = parts[2].strip() if len(parts) > 2 else ""
            yield Subject(normalize_subject_id(parts[0]), {language: parts[1].strip()},
                          classification=[(notation, "")] if notation else [])
