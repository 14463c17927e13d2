"""`RecordMemory`: the training records that neighbour sources vote with.

Holds ids, titles and the gold label matrix; `learn` appends confirmed records so that a
librarian's feedback is used at once, without retraining.
"""

from __future__ import annotations

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


class RecordMemory:
    def __init__(self, ids: list[str], titles: list[str], languages: list[str],
                 Y: sp.csr_matrix):
        self.ids = ids
        self.titles = titles
        self.languages = languages
        self.Y = Y.tocsr()

    @classmethod
    def from_records(cls, records: Sequence[Record], vocab: Vocabulary,
                     languages: Sequence[str]) -> RecordMemory:
        return cls([r.id for r in records], [r.title for r in records], list(languages),
                   label_matrix(records, vocab))

    def __len__(self) -> int:
        return len(self.ids)

    def append(self, records: Sequence[Record], languages: Sequence[str], Y: sp.csr_matrix
               ) -> np.ndarray:
        """Add records; returns their new row positions."""
        start = len(self.ids)
        self.ids.extend(r.id for r in records)
        self.titles.extend(r.title for r in records)
        self.languages.extend(languages)
        self.Y = sp.vstack([self.Y, Y]).tocsr()
        return np.arange(start, len(self.ids))

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path / "memory.json", {"ids": self.ids, "titles": self.titles,
                                                 "languages": self.languages})
        save_csr_atomic(path, "memory-Y", self.Y, values=False)  # gold labels: all ones
        write_json_atomic(path / "memory-Y.json", {"shape": list(self.Y.shape)})

    @classmethod
    def load(cls, path: Path, mmap: bool = False) -> RecordMemory:
        """``mmap``: the label lists (the matrix's column indices) stay in the file."""
        meta = read_json(path / "memory.json")
        shape = tuple(read_json(path / "memory-Y.json")["shape"])
        Y = load_csr(path, "memory-Y", shape, values=False, mmap=mmap)
        return cls(meta["ids"], meta["titles"], meta["languages"], Y)
