"""What gets encoded: ``title + " " + abstract`` for records; labels for subjects."""

from __future__ import annotations

from collections.abc import Iterable

from tagalign.records import Record


def record_texts(records: Iterable[Record]) -> list[str]:
    return [r.text for r in records]


def subject_texts(vocab, language: str = "de", with_alt: bool = False, sep: str = "; "
                  ) -> list[str]:
    """Preferred label in ``language`` (German when missing), optionally + alternates (R1)."""
    out = []
    for s in vocab.subjects:
        text = s.label(language)
        if with_alt:
            alts = s.alt_labels.get(language) or s.alt_labels.get("de") or []
            if alts:
                text = text + sep + sep.join(alts)
        out.append(text)
    return out
