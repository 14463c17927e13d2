"""Vocabulary rules: which subjects of a vocabulary a project may suggest.

Annif 1.4's ``exclude``/``include`` vocabulary arguments, on subject ids: ``exclude`` takes
ids (or GND URIs) or ``*`` (every subject); ``include`` then takes ids back out of the
excluded set. So ``exclude = "*"`` with ``include = [...]`` allows only the included
subjects. Rules apply at suggest time: changing them needs no retraining.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tagalign.errors import file_error
from tagalign.vocab.subject import normalize_subject_id
from tagalign.vocab.vocabulary import Vocabulary

ALL = "*"


def read_id_file(path: Path, what: str = "subject id file") -> list[str]:
    """Subject ids (or URIs), one a line; blank lines and ``#`` comments are skipped. A file
    that cannot be read raises `tagalign.errors.file_error`'s error, naming it as
    ``what`` (``--exclude`` on the command line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error(path, exc, what) from exc
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(normalize_subject_id(line))
    return out


def normalize_ids(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ALL if i.strip() == ALL else normalize_subject_id(i)
                               for i in ids))


@dataclass(frozen=True)
class SubjectRules:
    """``exclude`` (ids or ``*``) minus ``include`` = the subjects never suggested."""

    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "exclude", normalize_ids(self.exclude))
        object.__setattr__(self, "include", normalize_ids(self.include))

    def __bool__(self) -> bool:
        return bool(self.exclude)

    def unknown(self, vocab: Vocabulary) -> list[str]:
        """Ids of the rules that are not in ``vocab`` (a typo excludes nothing silently)."""
        return [i for i in (*self.exclude, *self.include) if i != ALL and i not in vocab]

    def excluded(self, vocab: Vocabulary) -> frozenset[str]:
        """The subjects never suggested; an id of a redirected heading stands for its
        target (`Vocabulary.current`: a rule written before a vocabulary update)."""
        base = set(vocab.ids) if ALL in self.exclude else {vocab.current(i)
                                                            for i in self.exclude
                                                            if i in vocab}
        return frozenset(base - {vocab.current(i) for i in self.include})

    def redirected(self, vocab: Vocabulary) -> dict[str, str]:
        """The rules' ids of redirected headings → their targets (read so: `excluded`)."""
        return {i: vocab.current(i) for i in (*self.exclude, *self.include)
                if vocab.current(i) != i}

    def describe(self) -> dict[str, list[str]]:
        return {"exclude": list(self.exclude), "include": list(self.include)}
