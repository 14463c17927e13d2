"""Vocabulary loaders, one per source format, behind a small registry.

``load_vocabulary(path)`` guesses the format from the name; ``format=`` forces one.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tagalign.errors import InputError, MissingFileError, file_error
from tagalign.io import InputReport, Reporter, open_binary, parse_lines
from tagalign.registry import Registry
from tagalign.runtime import ProgressCallback
from tagalign.vocab.subject import Subject, normalize_subject_id
from tagalign.vocab.vocabulary import SAVED_NAME, Vocabulary

# ``loader(path, report=...)``: malformed lines/entries go to the report (path:line), the
# rest of the file still loads (see `tagalign.io.parse_lines`).
Loader = Callable[..., Iterator[Subject]]
#: Vocabulary formats by name; those in their own modules are imported on first lookup
#: (the module registers its loader), as `tagalign.recipes.RECIPES` does for recipes.
VOCAB_FORMATS: Registry[Loader] = Registry("vocabulary format", choose="known:", lazy={
    "annif-tsv": "tagalign.vocab.annif",
    "gnd-json": "tagalign.vocab.gnd_json",
    "gnd-marc": "tagalign.vocab.gnd_marc",
    "invenio-yaml": "tagalign.vocab.invenio",
    "skos": "tagalign.vocab.skos",
})
register = VOCAB_FORMATS.register_as  # @register("gnd-tsv") def load_gnd_tsv(path, report)


class UnknownFormatError(InputError):
    """The format cannot be told from the file; the caller names the way to force one
    (``format=`` in Python, ``--format`` on the command line)."""

    def __init__(self, path: Path, formats: list[str], option: str | None = None):
        how = f" with {option}" if option else ""
        super().__init__(f"{path}: cannot tell the vocabulary format; choose one of "
                         f"{formats}{how}")
        self.formats = formats


def default_report(report: Reporter | None) -> Reporter:
    """The given report, or a fresh lenient `tagalign.io.InputReport`."""
    return report if report is not None else InputReport()


def first_line(path: Path) -> str:
    """The first line of a (possibly gzipped) text file, undecodable bytes replaced."""
    try:
        with open_binary(path) as fh:
            raw = fh.readline(1 << 16)
    except (EOFError, OSError):  # a cut-off .gz; the loader reports it properly
        return ""
    return raw.decode("utf-8", "replace").removeprefix("\ufeff")


@register("gnd-tsv")
def load_gnd_tsv(path: Path, report: Reporter | None = None) -> Iterator[Subject]:
    """Our ``gnd-subjects.tsv.gz``: header ``gnd_id  label_de  label_en``."""
    report = default_report(report)
    header = first_line(path).rstrip("\r\n").split("\t")
    if header[0] != "gnd_id":  # the wrong format: no line of it can be read
        report.bad(f"{path}:1", "expected a header starting with 'gnd_id'")
        return iter(())
    langs = [h.removeprefix("label_") for h in header[1:]]

    def parse(line: str, lineno: int) -> Subject | None:
        if lineno == 1:
            return None
        row = line.split("\t")  # what csv.reader gives with QUOTE_NONE, several times faster
        if not row[0]:
            return None
        labels = {lang: v for lang, v in zip(langs, row[1:], strict=False) if v}
        return Subject(normalize_subject_id(row[0]), labels)

    return parse_lines(path, report, parse, unit="subjects")


def guess_format(path: Path, option: str | None = None) -> str:
    """The vocabulary format of ``path``, by its name (and first bytes where names are
    shared); `UnknownFormatError` names ``option`` as the way to choose one."""
    path = Path(path)
    name = path.name.lower()
    if path.is_dir():
        if (path / SAVED_NAME).exists():
            return "saved"
        raise InputError(f"{path}: a folder, but no saved vocabulary ({SAVED_NAME}) in it")
    if name.endswith(".json.gz") and _is_saved(path):
        return "saved"
    stem = name.removesuffix(".gz")
    # the DNB's dump names (…_dnbmarc_20240213.mrc.xml.gz), binary MARC, or MARC-XML by
    # another name (a SKOS RDF/XML file never holds a MARC21/slim collection)
    if stem.endswith((".mrc", ".marc", ".mrc.xml", ".marc.xml", ".marcxml")) or (
            stem.endswith(".xml") and _is_marcxml(path)):
        return "gnd-marc"
    if stem.endswith((".ttl", ".rdf", ".xml", ".nt", ".owl")):
        return "skos"
    if stem.endswith((".yaml", ".yml")):
        return "invenio-yaml"
    if stem.endswith(".json"):
        return "gnd-json"
    if stem.endswith((".tsv", ".csv", ".txt")):
        return "gnd-tsv" if first_line(path).startswith("gnd_id") else "annif-tsv"
    raise UnknownFormatError(path, VOCAB_FORMATS.names() + ["saved"], option)


def _is_marcxml(path: Path) -> bool:
    try:
        with open_binary(path) as fh:
            head = fh.read(4096)
    except (EOFError, OSError):
        return False
    return b"www.loc.gov/MARC21/slim" in head


def _is_saved(path: Path) -> bool:
    try:
        with gzip.open(path, "rb") as fh:
            return b'"tagalign-vocabulary"' in fh.read(64)
    except (EOFError, gzip.BadGzipFile):  # not gzip after all: the loader reports it
        return False
    except OSError as exc:
        raise file_error(path, exc) from exc


def load_vocabulary(path: Path | str, format: str | None = None,
                    report: Reporter | None = None, option: str | None = None,
                    entity_types: str | None = None,
                    progress: ProgressCallback | None = None) -> Vocabulary:
    """Load a vocabulary from any supported source (see `VOCAB_FORMATS`) or a saved one.

    ``entity_types``: for the GND authority dump (``gnd-marc``), which entity types to keep
    (``"s,g,p"`` or ``"all"``; default subject headings only, `tagalign.vocab.gnd_marc`);
    any other format refuses it. ``progress``: told ``(phase, done, total)`` while the GND
    authority dump, the one format that takes minutes, is read (the file's bytes).

    Malformed lines/entries are reported to ``report`` (a `tagalign.records.InputReport`;
    strict ones raise at the first) and skipped; the rest of the file still loads. A
    missing file raises `MissingFileError`; one whose format cannot be told,
    `UnknownFormatError`, naming ``option`` (the CLI's ``--format``) as the way out.
    """
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"vocabulary not found: {path}", path)
    fmt = format or guess_format(path, option)
    loader = VOCAB_FORMATS.lookup(fmt) if fmt != "saved" else None
    if entity_types is not None and fmt != "gnd-marc":
        raise InputError(f"{path}: entity types can be chosen in a GND authority dump "
                         f"(format gnd-marc) only, not in format {fmt}")
    if loader is None:
        return Vocabulary.load(path)
    options: dict[str, Any] = {"progress": progress} if fmt == "gnd-marc" else {}
    if entity_types is not None:
        from tagalign.vocab.gnd_marc import parse_entity_types

        try:
            options["entity_types"] = parse_entity_types(entity_types)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
    vocab = Vocabulary(loader(path, report=default_report(report), **options))
    if not len(vocab):
        raise InputError(f"{path}: no subjects found (format {fmt})")
    return vocab


def load_invenio_gnd() -> Vocabulary:
    """The GND vocabulary bundled with `invenio-subjects-gnd` (the demo's default)."""
    from tagalign.vocab.invenio import load_invenio_gnd as _load

    return _load()
