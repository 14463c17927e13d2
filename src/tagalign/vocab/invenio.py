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

from tagalign.vocab.loaders import open_text, register
from tagalign.vocab.subject import Subject, normalize_subject_id
from tagalign.vocab.vocabulary import Vocabulary


def _scalar(raw: str) -> str:
    raw = raw.strip()
    if raw.startswith('"') and raw.endswith('"'):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            pass
    value = yaml.safe_load(raw)
    return "" if value is None else str(value)


@register("invenio-yaml")
def load_invenio_yaml(path: Path, language: str = "de") -> Iterator[Subject]:
    """``- id: "http://d-nb.info/gnd/…"`` / ``scheme: GND`` / ``subject: "label"`` entries."""
    sid: str | None = None
    with open_text(path) as fh:
        for line in fh:
            key, _, value = line.lstrip("- ").partition(":")
            key = key.strip()
            if key == "id":
                sid = normalize_subject_id(_scalar(value))
            elif key == "subject" and sid:
                label = _scalar(value)
                if label:
                    yield Subject(sid, {language: label})
                sid = None


def invenio_yaml_path() -> Path:
    import invenio_subjects_gnd

    return Path(invenio_subjects_gnd.__file__).parent / "vocabularies" / "subjects_gnd.yaml"


def load_invenio_gnd() -> Vocabulary:
    """The GND vocabulary bundled with the installed `invenio-subjects-gnd` package."""
    return Vocabulary(load_invenio_yaml(invenio_yaml_path()))
