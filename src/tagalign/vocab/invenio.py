"""The `invenio-subjects-gnd` package's GND vocabulary (204k German labels, CC0).

Its YAML is a flat list of ``{id, scheme, subject}`` entries; a line-wise reader loads it
in about a second where a generic YAML parser takes minutes. Lines it does not expect
fall back to the YAML parser, so unusual quoting still loads correctly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import yaml

from tagalign.io import Reporter, parse_lines
from tagalign.vocab.loaders import default_report, register
from tagalign.vocab.subject import Subject, normalize_subject_id
from tagalign.vocab.vocabulary import Vocabulary


def _scalar(raw: str) -> str:
    raw = raw.strip()
    if raw.startswith('"') and raw.endswith('"'):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            pass
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"not a YAML scalar: {str(exc).splitlines()[0]}") from None
    if isinstance(value, dict | list):
        raise ValueError("expected a scalar value")
    return "" if value is None else str(value)


@register("invenio-yaml")
def load_invenio_yaml(path: Path, language: str = "de", report: Reporter | None = None
                      ) -> Iterator[Subject]:
    """``- id: "http://d-nb.info/gnd/…"`` / ``scheme: GND`` / ``subject: "label"`` entries.

    Decoded per line (`tagalign.io.parse_lines`): a bad line costs its entry only.
    """
    sid: list[str | None] = [None]  # the entry being read

    def parse(line: str, lineno: int) -> Subject | None:
        key, _, value = line.lstrip("- ").partition(":")
        key = key.strip()
        if key == "id":
            sid[0] = None  # a bad id line drops its entry, not the next one
            sid[0] = normalize_subject_id(_scalar(value))
        elif key == "subject" and sid[0]:
            subject_id, sid[0] = sid[0], None
            label = _scalar(value)
            if label:
                return Subject(subject_id, {language: label})
        return None

    return parse_lines(path, default_report(report), parse, unit="subjects")


def invenio_yaml_path() -> Path:
    import invenio_subjects_gnd

    return Path(invenio_subjects_gnd.__file__).parent / "vocabularies" / "subjects_gnd.yaml"


def load_invenio_gnd() -> Vocabulary:
    """The GND vocabulary bundled with the installed `invenio-subjects-gnd` package."""
    return Vocabulary(load_invenio_yaml(invenio_yaml_path()))
