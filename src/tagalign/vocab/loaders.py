"""Vocabulary loaders, one per source format, behind a small registry.

``load_vocabulary(path)`` guesses the format from the name; ``format=`` forces one.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Iterator
from pathlib import Path

from tagalign.vocab.subject import Subject, normalize_subject_id
from tagalign.vocab.vocabulary import SAVED_NAME, Vocabulary

Loader = Callable[[Path], Iterator[Subject]]
VOCAB_FORMATS: dict[str, Loader] = {}


def register(name: str) -> Callable[[Loader], Loader]:
    def deco(fn: Loader) -> Loader:
        VOCAB_FORMATS[name] = fn
        return fn

    return deco


def open_text(path: Path) -> io.TextIOBase:
    """Open a text file, transparently gunzipping ``*.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


@register("gnd-tsv")
def load_gnd_tsv(path: Path) -> Iterator[Subject]:
    """Our ``gnd-subjects.tsv.gz``: header ``gnd_id  label_de  label_en``."""
    with open_text(path) as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if not header or header[0] != "gnd_id":
            raise ValueError(f"{path}: expected a header starting with 'gnd_id'")
        langs = [h.removeprefix("label_") for h in header[1:]]
        for row in reader:
            if not row or not row[0]:
                continue
            labels = {lang: v for lang, v in zip(langs, row[1:], strict=False) if v}
            yield Subject(normalize_subject_id(row[0]), labels)


def guess_format(path: Path) -> str:
    path = Path(path)
    name = path.name.lower()
    if path.is_dir():
        if (path / SAVED_NAME).exists():
            return "saved"
        raise ValueError(f"{path}: a folder, but no saved vocabulary ({SAVED_NAME}) in it")
    if name.endswith(".json.gz") and _is_saved(path):
        return "saved"
    stem = name.removesuffix(".gz")
    if stem.endswith((".ttl", ".rdf", ".xml", ".nt", ".owl")):
        return "skos"
    if stem.endswith((".yaml", ".yml")):
        return "invenio-yaml"
    if stem.endswith(".json"):
        return "gnd-json"
    if stem.endswith((".tsv", ".csv", ".txt")):
        with open_text(path) as fh:
            first = fh.readline()
        return "gnd-tsv" if first.startswith("gnd_id") else "annif-tsv"
    raise ValueError(f"{path}: cannot tell the vocabulary format; pass format= one of "
                     f"{sorted(VOCAB_FORMATS) + ['saved']}")


def _is_saved(path: Path) -> bool:
    with gzip.open(path, "rb") as fh:
        return b'"tagalign-vocabulary"' in fh.read(64)


def load_vocabulary(path: Path | str, format: str | None = None) -> Vocabulary:
    """Load a vocabulary from any supported source (see `VOCAB_FORMATS`) or a saved one."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"vocabulary not found: {path}")
    fmt = format or guess_format(path)
    if fmt == "saved":
        return Vocabulary.load(path)
    if fmt not in VOCAB_FORMATS:
        raise ValueError(f"unknown vocabulary format {fmt!r}; known: {sorted(VOCAB_FORMATS)}")
    vocab = Vocabulary(VOCAB_FORMATS[fmt](path))
    if not len(vocab):
        raise ValueError(f"{path}: no subjects found (format {fmt})")
    return vocab


def load_invenio_gnd() -> Vocabulary:
    """The GND vocabulary bundled with `invenio-subjects-gnd` (the demo's default)."""
    from tagalign.vocab.invenio import load_invenio_gnd as _load

    return _load()


# Formats in their own modules register themselves on import.
from tagalign.vocab import annif, gnd_json, invenio, skos  # noqa: E402,F401  isort: skip
