"""`RecordMemory`: the training records that neighbour sources vote with.

Holds ids, titles and the gold label matrix; `relabel` and `append` take a librarian's
feedback at once, without retraining, one row per record id: the latest decision on a
record replaces the earlier ones (`HybridPipeline.learn`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tagalign.io import load_csr, read_json, save_csr_atomic, write_json_atomic
from tagalign.records import Record
from tagalign.vocab import Vocabulary


def label_matrix(records: Sequence[Record], vocab: Vocabulary) -> sp.csr_matrix:
    """Binary (records × vocabulary) matrix of gold subjects (ids not in vocab dropped)."""
    indptr = [0]
    indices: list[int] = []
    for r in records:
        pos = sorted(set(vocab.positions(r.subjects)))
        indices.extend(pos)
        indptr.append(len(indices))
    data = np.ones(len(indices), np.float32)
    return sp.csr_matrix((data, np.asarray(indices, np.int64), np.asarray(indptr, np.int64)),
                         shape=(len(records), len(vocab)))


def text_digest(record: Record) -> str:
    """What the neighbour sources indexed of a record (its text and language), hashed: a
    record learned again with the same digest keeps its row's vectors."""
    key = f"{record.language or ''}\x1f{record.title}\x1f{record.abstract}"
    return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()


class RecordMemory:
    """Rows of records (ids, titles, languages, gold labels ``Y``); ``digests``: each
    row's `text_digest` ("" unknown: a model saved before they were kept)."""

    def __init__(self, ids: list[str], titles: list[str], languages: list[str],
                 Y: sp.csr_matrix, digests: list[str] | None = None):
        self.ids = ids
        self.titles = titles
        self.languages = languages
        self.Y = Y.tocsr()
        self.digests = digests if digests is not None else [""] * len(ids)
        self._rows: dict[str, int] | None = None  # id → its latest row, built on first learn

    @classmethod
    def from_records(cls, records: Sequence[Record], vocab: Vocabulary,
                     languages: Sequence[str]) -> RecordMemory:
        return cls([r.id for r in records], [r.title for r in records], list(languages),
                   label_matrix(records, vocab), [text_digest(r) for r in records])

    def __len__(self) -> int:
        return len(self.ids)

    def row_of(self, record_id: str) -> int | None:
        """The row that holds ``record_id`` (its latest, should training have held it twice)."""
        if self._rows is None:
            self._rows = {rid: i for i, rid in enumerate(self.ids)}
        return self._rows.get(record_id)

    def append(self, records: Sequence[Record], languages: Sequence[str], Y: sp.csr_matrix
               ) -> np.ndarray:
        """Add records; returns their new row positions."""
        start = len(self.ids)
        self.ids.extend(r.id for r in records)
        self.titles.extend(r.title for r in records)
        self.languages.extend(languages)
        self.digests.extend(text_digest(r) for r in records)
        self.Y = sp.vstack([self.Y, Y]).tocsr()
        if self._rows is not None:
            self._rows.update((r.id, start + i) for i, r in enumerate(records))
        return np.arange(start, len(self.ids))

    def relabel(self, records: Sequence[Record], Y: sp.csr_matrix
                ) -> tuple[list[int], np.ndarray]:
        """The latest decision per record id (``Y``: the records' labels; ids unique).

        A record held with the same text: its row's labels become ``Y``'s (none: the row
        stops voting). Held with another text: the old row's labels are cleared (its
        vectors cannot be changed in place) and the record needs a new row. Returns the
        positions in ``records`` that need a new row (`append`; only records with labels)
        and the old rows cleared because their text changed."""
        fresh, rows, cleared = [], [], []
        for i, rec in enumerate(records):
            row = self.row_of(rec.id)
            has_labels = Y.indptr[i + 1] > Y.indptr[i]
            if row is not None and self.digests[row] == text_digest(rec):
                rows.append((row, i))
                continue
            if row is not None:
                rows.append((row, -1))
                cleared.append(row)
            if has_labels:
                fresh.append(i)
        if rows:
            self._set_rows(np.array([r for r, _ in rows], np.int64),
                           sp.vstack([Y[i] if i >= 0 else sp.csr_matrix((1, Y.shape[1]),
                                                                        dtype=Y.dtype)
                                      for _, i in rows]).tocsr())
        return fresh, np.array(cleared, np.int64)

    def _set_rows(self, rows: np.ndarray, labels: sp.csr_matrix) -> None:
        """Replace the labels of ``rows`` by ``labels``' rows; one new matrix, swapped in
        at once (a concurrent reader sees the old or the new labels, never half)."""
        n = self.Y.shape[0]
        keep = np.ones(n, np.float32)
        keep[rows] = 0.0
        place = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, np.arange(len(rows)))),
                              shape=(n, len(rows)))
        Y = (sp.diags(keep) @ self.Y + place @ labels.astype(np.float32)).tocsr()
        Y.eliminate_zeros()
        Y.sort_indices()
        self.Y = Y.astype(self.Y.dtype)

    def widen(self, n_subjects: int) -> None:
        """Room for the headings a vocabulary update appended (label columns up to
        ``n_subjects``; none of the rows has them)."""
        if self.Y.shape[1] < n_subjects:
            Y = self.Y.copy()
            Y.resize((Y.shape[0], n_subjects))
            self.Y = Y

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path / "memory.json", {"ids": self.ids, "titles": self.titles,
                                                 "languages": self.languages,
                                                 "digests": self.digests})
        save_csr_atomic(path, "memory-Y", self.Y, values=False)  # gold labels: all ones
        write_json_atomic(path / "memory-Y.json", {"shape": list(self.Y.shape)})

    @classmethod
    def load(cls, path: Path, mmap: bool = False) -> RecordMemory:
        """``mmap``: the label lists (the matrix's column indices) stay in the file."""
        meta = read_json(path / "memory.json")
        shape = tuple(read_json(path / "memory-Y.json")["shape"])
        Y = load_csr(path, "memory-Y", shape, values=False, mmap=mmap)
        return cls(meta["ids"], meta["titles"], meta["languages"], Y, meta.get("digests"))
