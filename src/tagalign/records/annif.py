"""Annif document corpus TSV: ``text<TAB><uri1> <uri2> …`` per line (text = title)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tagalign.records.loaders import register
from tagalign.records.record import Record
from tagalign.records.report import InputReport
from tagalign.vocab.loaders import open_text
from tagalign.vocab.subject import normalize_subject_id


@register("annif-tsv")
def read_annif_tsv(path: Path, report: InputReport) -> Iterator[Record]:
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            text, sep, uris = line.partition("\t")
            if not text.strip():
                report.bad(f"{path}:{lineno}", "empty text")
                continue
            subjects = [normalize_subject_id(u) for u in uris.split()] if sep else []
            yield Record(id=f"{path.stem}:{lineno}", title=text.strip(), subjects=subjects)
