"""Label retrieval: record embedding vs every subject's label embedding.

The only source that can suggest subjects never seen in training. Subjects are embedded
once (German preferred label; English label averaged in where the vocabulary has one).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.index import VectorIndex
from tagalign.suggest.sources.base import (
    Batch,
    Candidates,
    FitContext,
    Source,
    ranks_of,
    register_source,
)


def subject_matrix(vocab, encoder) -> np.ndarray:
    de = encoder.encode([s.label("de") for s in vocab.subjects], show_progress=True)
    en_pos = [i for i, s in enumerate(vocab.subjects) if "en" in s.labels]
    if en_pos:
        en = encoder.encode([vocab.subjects[i].labels["en"] for i in en_pos])
        de[en_pos] += en
        de /= np.linalg.norm(de, axis=1, keepdims=True).clip(1e-9)
    return de.astype(np.float32)


@register_source
class LabelRetrieval(Source):
    name = "labels"
    features = ["label_sim", "label_rank", "label_gap"]

    def __init__(self, top_k: int = 40, index: str = "ivf", **params: Any):
        super().__init__(top_k=top_k, index=index, **params)
        self.top_k = top_k
        self.index_kind = index
        self.index_: VectorIndex | None = None
        self.matrix_: np.ndarray | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any], top_k: int) -> LabelRetrieval:
        return cls(top_k=top_k, index=params["ann_index"])

    def fit(self, ctx: FitContext) -> None:
        self.matrix_ = subject_matrix(ctx.vocab, ctx.encoder)
        self.index_ = VectorIndex(self.index_kind).build(self.matrix_)

    def candidates(self, batch: Batch) -> Candidates:
        q = np.ascontiguousarray(batch.embeddings, dtype=np.float32)
        sims, pos = self.index_.search(q, self.top_k)
        n = len(batch)
        rows = np.repeat(np.arange(n), self.top_k)
        ok = pos.ravel() >= 0
        rows, cols, vals = rows[ok], pos.ravel()[ok].astype(np.int64), sims.ravel()[ok]
        gap = vals - sims[:, 0][rows]
        feats = np.column_stack([vals, ranks_of(rows), gap]).astype(np.float32)
        return Candidates(rows, cols, feats, self.features)

    def save(self, path: Path) -> None:
        self.index_.save(path / "index")

    def load_state(self, path: Path, ctx: FitContext) -> None:
        self.index_ = VectorIndex.load(path / "index", mmap=ctx.mmap)
