"""Annif document corpus TSV: ``text<TAB><uri1> <uri2> …`` per line (text = title)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tagalign.io import InputReport, parse_lines
from tagalign.records.loaders import register
from tagalign.records.record import Record
from tagalign.vocab.subject import normalize_subject_id


@register("annif-tsv")
def read_annif_tsv(path: Path, report: InputReport) -> Iterator[Record]:
    """Decoded per line (`tagalign.io.parse_lines`); the record id is ``{file stem}:{line}``."""

    def parse(line: str, lineno: int) -> Record | None:
        if not line.strip():
            return None
        text, sep, uris = line.partition("\t")
        if not text.strip():
            raise ValueError("empty text")
        subjects = [normalize_subject_id(u) for u in uris.split()] if sep else []
        return Record(id=f"{path.stem}:{lineno}", title=text.strip(), subjects=subjects)

    return parse_lines(path, report, parse)
