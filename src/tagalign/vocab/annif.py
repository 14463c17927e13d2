"""Annif subject TSV: ``<uri>\\tlabel`` (optionally ``\\tnotation``) per line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tagalign.io import Reporter, parse_lines
from tagalign.vocab.loaders import default_report, register
from tagalign.vocab.subject import Subject, normalize_subject_id


@register("annif-tsv")
def load_annif_tsv(path: Path, language: str = "de", report: Reporter | None = None
                   ) -> Iterator[Subject]:
    def parse(line: str, lineno: int) -> Subject | None:
        if not line.strip():
            return None
        parts = line.split("\t")
        if len(parts) < 2 or not parts[1].strip():
            raise ValueError("expected '<uri>\\tlabel'")
        notation = parts[2].strip() if len(parts) > 2 else ""
        return Subject(normalize_subject_id(parts[0]), {language: parts[1].strip()},
                       classification=[(notation, "")] if notation else [])

    return parse_lines(path, default_report(report), parse, unit="subjects")
