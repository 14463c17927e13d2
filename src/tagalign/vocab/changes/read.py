"""Change files read into a `ChangeSet`: the readers by format, behind a registry, and
`read_changes`, which reads files in the order given and returns nothing when one of them
holds a malformed record (unless asked to skip those)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from tagalign.errors import InputError, MissingFileError
from tagalign.io import Reporter
from tagalign.registry import Registry
from tagalign.vocab.changes.model import Change, ChangeSet
from tagalign.vocab.loaders import default_report, guess_format

#: malformed records named in the error before "… N more"
SHOWN = 5


class ChangeReader(Protocol):
    """Reads one change file: its `Change`s in file order; malformed records go to the
    report as ``path: record N: why`` (the vocabulary loaders' convention)."""

    name: ClassVar[str]

    def read(self, path: Path, report: Reporter) -> Iterator[Change]: ...


#: change file formats by the vocabulary format name they share (`guess_format` tells them)
CHANGE_READERS: Registry[type[ChangeReader]] = Registry(
    "change file format", lazy={"gnd-marc": "tagalign.vocab.changes.marc",
                                "skos": "tagalign.vocab.changes.skos"})
register_reader = CHANGE_READERS.register


class BadChangesError(InputError):
    """A change file holds malformed records; nothing was read (``skip_bad`` reads the
    rest). ``problems``: every ``(where, why)``."""

    def __init__(self, problems: list[tuple[str, str]], option: str | None = None):
        shown = "; ".join(f"{where}: {why}" for where, why in problems[:SHOWN])
        more = f" (… {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        how = f"; {option} reads the rest" if option else ""
        super().__init__(f"{len(problems)} malformed records in the change files, so none "
                         f"was read{how}: {shown}{more}")
        self.problems = problems


class _Collected:
    """A `Reporter` that keeps every problem, to raise or to pass on once a file is read."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def bad(self, where: str, why: str) -> None:
        self.problems.append((where, why))


def change_format(path: Path, format: str | None = None) -> str | None:
    """The change file format of ``path`` (``format`` forces one), or None for a vocabulary
    format that says nothing of changes (TSV, JSON, a saved vocabulary): such a file can
    only be compared whole (`tagalign.vocab.changes.summary.read_whole`)."""
    fmt = format or guess_format(Path(path), "--format")
    return fmt if fmt in CHANGE_READERS else None


def make_reader(fmt: str, entity_types: str | None = None) -> ChangeReader:
    """The reader of format ``fmt``; ``entity_types`` (``"s,g"``, ``"all"``): the GND's
    entity types kept, as `tagalign.vocab.load_vocabulary` takes them (MARC only)."""
    options: dict[str, Any] = {}
    if entity_types is not None:
        if fmt != "gnd-marc":
            raise InputError(f"entity types can be chosen in GND MARC change files only, "
                             f"not in format {fmt}")
        from tagalign.vocab.gnd_marc import parse_entity_types

        try:
            options["types"] = parse_entity_types(entity_types)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
    return CHANGE_READERS.lookup(fmt)(**options)


def read_changes(paths: Iterable[Path | str], *,
                 format: str | Sequence[str | None] | None = None,
                 skip_bad: bool = False, report: Reporter | None = None,
                 entity_types: str | None = None,
                 option: str | None = None) -> ChangeSet:
    """The `ChangeSet` of change files read in the order given (a later record of an id
    wins: `ChangeSet.add`). ``format``: one for every file, or one per file (None: that
    file's own, `change_format`). A malformed record anywhere raises `BadChangesError`
    naming each (``option``: the way to skip them, e.g. the CLI's ``--skip-bad``) and
    nothing is returned; ``skip_bad``: they go to ``report`` (warnings by default) and the
    rest is read. A file in a format without changes (TSV, JSON …) is refused."""
    files = [Path(p) for p in paths]
    formats = ([format] * len(files) if format is None or isinstance(format, str)
               else list(format))
    if len(formats) != len(files):
        raise InputError(f"{len(formats)} formats for {len(files)} change files: give one "
                         "for every file or one per file")
    out = ChangeSet(sources=[str(p) for p in files])
    collected = _Collected()
    for path, forced in zip(files, formats, strict=True):
        if not path.exists():
            raise MissingFileError(f"change file not found: {path}", path)
        fmt = change_format(path, forced)
        if fmt is None:
            raise InputError(f"{path}: not a change file (GND MARC 21 or SKOS); a whole "
                             "vocabulary in another format can only be compared whole")
        out.extend(make_reader(fmt, entity_types).read(path, collected))
    if collected.problems:
        if not skip_bad:
            raise BadChangesError(collected.problems, option)
        sink = default_report(report)
        for where, why in collected.problems:
            sink.bad(where, why)
    return out
