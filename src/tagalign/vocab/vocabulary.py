"""`Vocabulary`: an ordered, indexed set of subjects, saved in a fast pickle-free form."""

from __future__ import annotations

import gzip
import hashlib
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import orjson

from tagalign.errors import ConflictError, InputError
from tagalign.io import write_bytes_atomic
from tagalign.vocab.prefix import PrefixIndex, fold
from tagalign.vocab.subject import Subject

FORMAT_VERSION = 1
SAVED_NAME = "vocab.json.gz"
_PREFIX_LOCK = threading.Lock()  # one build of a prefix index, however many requests ask


_NO_MATCH = 4
# columns every saved file has; later ones are written only when a subject has a value, so
# a vocabulary without them saves byte for byte as before they existed
_FIRST_COLUMNS = ("alt_labels", "broader", "narrower", "related", "classification",
                  "definition")


def _match_rank(label: str, needle: str, at_word: re.Pattern[str]) -> int:
    """0 exact, 1 prefix, 2 a later word starts with it, 3 substring, `_NO_MATCH` none."""
    if needle not in label:
        return _NO_MATCH
    if label == needle:
        return 0
    if label.startswith(needle):
        return 1
    return 2 if at_word.search(label) else 3


class VocabularyMismatchError(ConflictError, ValueError):
    """An artifact was trained against another vocabulary than the one given."""


#: why a heading is retired (`Vocabulary.retired`): merged into another, gone, split
RETIRED_KINDS = ("redirected", "deleted", "split")


class Vocabulary:
    """Subjects in a fixed order; position ``i`` is the row of subject ``i`` in every matrix.

    A vocabulary updated by change files (`tagalign.vocab.changes.apply`) keeps every
    position: new headings are appended, and a heading redirected, deleted or split stays
    where it was, ``retired`` (never suggested; a redirected one's evidence counts for its
    target: `successors`). ``revision`` names the changes applied (None: none); it is part
    of the `fingerprint`, so a model checks it was updated with the same ones."""

    def __init__(self, subjects: Iterable[Subject]):
        self.subjects: list[Subject] = []
        self._index: dict[str, int] = {}
        #: retired id → (kind of `RETIRED_KINDS`, the target id of a redirect, else None)
        self.retired: dict[str, tuple[str, str | None]] = {}
        self.revision: str | None = None
        for s in subjects:
            if s.id in self._index:
                self._merge(self.subjects[self._index[s.id]], s)
                continue
            self._index[s.id] = len(self.subjects)
            self.subjects.append(s)
        self._fingerprint: str | None = None
        self._languages: list[str] | None = None

    @staticmethod
    def _merge(into: Subject, other: Subject) -> None:
        for lang, label in other.labels.items():
            into.labels.setdefault(lang, label)
        for lang, alts in other.alt_labels.items():
            have = into.alt_labels.setdefault(lang, [])
            have.extend(a for a in alts if a not in have)
        for name in ("broader", "narrower", "related", "classification", "entity_types"):
            have = getattr(into, name)
            have.extend(x for x in getattr(other, name) if x not in have)
        into.definition = into.definition or other.definition

    def __len__(self) -> int:
        return len(self.subjects)

    def __iter__(self) -> Iterator[Subject]:
        return iter(self.subjects)

    def __contains__(self, subject_id: object) -> bool:
        return subject_id in self._index

    def __getitem__(self, subject_id: str) -> Subject:
        return self.subjects[self._index[subject_id]]

    def get(self, subject_id: str) -> Subject | None:
        i = self._index.get(subject_id)
        return None if i is None else self.subjects[i]

    def position(self, subject_id: str) -> int:
        return self._index[subject_id]

    def positions(self, subject_ids: Iterable[str]) -> list[int]:
        """Positions of the ids that are in the vocabulary (others are dropped)."""
        idx = self._index
        return [idx[s] for s in subject_ids if s in idx]

    def search(self, query: str, limit: int | None = 20) -> list[Subject]:
        """Subjects whose labels (preferred or alternate, any language) contain ``query``,
        best match first: a label equal to it, then starting with it, then a word of a
        label starting with it, then containing it (case-insensitive); ties keep
        vocabulary order. ``limit`` None or negative: every match.

        One pass over the labels; the type-ahead box of the web page calls this too.
        """
        needle = fold(query)
        if not needle:
            return []
        at_word = re.compile(r"(?<!\w)" + re.escape(needle))
        ranked: list[tuple[int, int, Subject]] = []
        for i, subject in enumerate(self.subjects):
            if subject.id in self.retired:  # no more to be chosen
                continue
            # folded as the prefix index folds: a typed "ä" finds a decomposed one (the
            # GND's labels often have them so)
            best = min((_match_rank(fold(lab), needle, at_word)
                        for lab in subject.all_labels()),
                       default=_NO_MATCH)
            if best < _NO_MATCH:
                ranked.append((best, i, subject))
        ranked.sort(key=lambda t: (t[0], t[1]))
        if limit is not None and limit >= 0:
            ranked = ranked[:limit]
        return [s for _, _, s in ranked]

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.subjects]

    def label(self, subject_id: str, language: str | None = None) -> str:
        s = self.get(subject_id)
        return subject_id if s is None else s.label(language)

    @property
    def languages(self) -> list[str]:
        """The label languages, the most used first. Counted once, as `fingerprint` is
        hashed once (the subjects are fixed once made): the Annif ``/v1/projects`` answer
        names them, and counting 1.5 million headings took about a second a request."""
        if self._languages is None:
            seen: dict[str, int] = {}
            for s in self.subjects:
                for lang in s.labels:
                    seen[lang] = seen.get(lang, 0) + 1
            self._languages = sorted(seen, key=lambda k: -seen[k])
        return list(self._languages)

    @property
    def fingerprint(self) -> str:
        """Hash of the ordered ids (and of the `revision`, where one): artifacts record it
        and refuse another vocabulary."""
        if self._fingerprint is None:
            ids = "\n".join(s.id for s in self.subjects)
            if self.revision is not None:
                ids += f"\n#revision {self.revision}"
            self._fingerprint = hashlib.sha256(ids.encode("utf-8")).hexdigest()[:16]
        return self._fingerprint

    def suggestable(self, subject_id: str) -> bool:
        """In the vocabulary and not retired (redirected, deleted or split)."""
        return subject_id in self._index and subject_id not in self.retired

    @property
    def n_suggestable(self) -> int:
        """How many headings can be suggested: all but the retired ones (what the REST
        APIs give as the vocabulary's size)."""
        return len(self.subjects) - len(self.retired)

    def current(self, subject_id: str) -> str:
        """The id that stands for ``subject_id`` now: a redirected heading's target, else
        the id itself."""
        kind, target = self.retired.get(subject_id, ("", None))
        return target if kind == "redirected" and target is not None else subject_id

    def successor(self, subject_id: str) -> str | None:
        """The id a decision or a gold subject on ``subject_id`` stands for now: the id
        itself (one the vocabulary does not hold too), a redirected heading's target;
        None for a deleted or split heading (its decisions cannot be moved safely)."""
        now = self.current(subject_id)
        return None if now in self.retired else now

    def successors(self) -> np.ndarray | None:
        """Position → where its evidence goes: itself, a redirected heading's target
        (chains followed when made: `tagalign.vocab.changes.apply`), -1 for a deleted or
        split one; None when nothing is retired (every position its own)."""
        if not self.retired:
            return None
        cached = getattr(self, "_successors", None)
        if cached is None:
            cached = np.arange(len(self.subjects), dtype=np.int64)
            for sid, (_kind, target) in self.retired.items():
                cached[self._index[sid]] = (self._index[target] if target is not None
                                            and target in self._index else -1)
            self._successors = cached
        return cached

    def check(self, fingerprint: str, size: int, what: str = "this artifact") -> None:
        """Raise `VocabularyMismatchError` unless ``fingerprint`` is this vocabulary's."""
        if fingerprint != self.fingerprint:
            raise VocabularyMismatchError(
                f"{what} was trained with another vocabulary ({size} subjects, fingerprint "
                f"{fingerprint}); the one given has {len(self)} subjects, fingerprint "
                f"{self.fingerprint}. Train it again with this vocabulary or load the right one."
            )

    @property
    def prefix_index(self) -> PrefixIndex:
        """Labels of both languages sorted for prefix search (retired headings left out),
        built on first use (the vocabulary is not changed after loading, so the index never
        goes stale)."""
        index = getattr(self, "_prefix_index", None)  # `load` bypasses __init__
        if index is None:
            with _PREFIX_LOCK:
                index = getattr(self, "_prefix_index", None)
                if index is None:
                    index = self._prefix_index = PrefixIndex(
                        s for s in self.subjects if s.id not in self.retired)
        return index

    # -- fast saved form: one gzipped JSON of columns, no pickle --------------------------
    def save(self, path: Path) -> Path:
        """Save to ``path`` (a folder gets ``vocab.json.gz``); returns the file written."""
        path = Path(path)
        if path.suffix != ".gz":
            path = path / SAVED_NAME
        langs = self.languages
        cols: dict = {
            "format": "tagalign-vocabulary",
            "version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "ids": [s.id for s in self.subjects],
            "labels": {lang: [s.labels.get(lang, "") for s in self.subjects] for lang in langs},
        }
        for name in ("alt_labels", "broader", "narrower", "related", "classification",
                     "definition", "entity_types"):
            sparse = {}
            for i, s in enumerate(self.subjects):
                v = getattr(s, name)
                if v:
                    sparse[i] = v
            if sparse or name in _FIRST_COLUMNS:
                cols[name] = sparse
        if self.retired:  # only an updated vocabulary has these (saved as before otherwise)
            cols["retired"] = {self._index[sid]: [kind, target]
                               for sid, (kind, target) in self.retired.items()}
        if self.revision is not None:
            cols["revision"] = self.revision
        # the bytes json.dumps(ensure_ascii=False, separators=(",", ":")) wrote before, 16
        # times faster and without a str of the whole file beside them (1.5M subjects:
        # 0.9 s against 14 s)
        data = orjson.dumps(cols, option=orjson.OPT_NON_STR_KEYS)
        write_bytes_atomic(path, gzip.compress(data, compresslevel=3))
        return path

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        """Load a vocabulary saved by `save` (file or folder holding ``vocab.json.gz``)."""
        path = Path(path)
        if path.is_dir():
            path = path / SAVED_NAME
        with gzip.open(path, "rb") as fh:
            cols = orjson.loads(fh.read())
        if cols.get("format") != "tagalign-vocabulary":
            raise InputError(f"{path}: not a saved tagalign vocabulary")
        ids = cols["ids"]
        label_cols = cols["labels"]
        subjects = []
        for i, sid in enumerate(ids):
            labels = {lang: col[i] for lang, col in label_cols.items() if col[i]}
            subjects.append(Subject(sid, labels))
        # columns a file saved before they existed lacks load empty (entity_types)
        for name in ("alt_labels", "broader", "narrower", "related", "definition"):
            for i, v in cols.get(name, {}).items():
                setattr(subjects[int(i)], name, v)
        for i, v in cols.get("entity_types", {}).items():
            # a few codes, one copy each; the parsed list kept (a new one per subject
            # beside the parsed ones: +0.2 GB at the peak of 1.5M subjects)
            v[:] = [sys.intern(code) for code in v]
            subjects[int(i)].entity_types = v
        for i, v in cols.get("classification", {}).items():
            subjects[int(i)].classification = [tuple(x) for x in v]
        vocab = cls.__new__(cls)
        vocab.subjects = subjects
        vocab._index = {sid: i for i, sid in enumerate(ids)}
        vocab._fingerprint = cols.get("fingerprint")
        vocab._languages = None
        vocab.retired = {ids[int(i)]: (kind, target)
                         for i, (kind, target) in cols.get("retired", {}).items()}
        vocab.revision = cols.get("revision")
        return vocab
