"""`nbf-attention` (R2) — NBF: frozen embeddings + dimension-as-token attention + MLP.

Published defaults: 15 random negatives, margin 0.2 (cosine distance), AdamW lr 1e-4 with
no weight decay, CosineAnnealingLR(T_max 20, eta_min 1e-6), batch 4, 20 epochs. At
inference every subject is transformed once (cached in the model folder) and records are
matched by cosine in a FAISS index.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.records import Record
from tagalign.train.head_training import gold_means, train_head
from tagalign.train.heads import DimensionAttentionHead
from tagalign.train.recipes.base import register_recipe
from tagalign.train.recipes.dense import DENSE_DEFAULTS, DenseRecipe


@register_recipe
class NBFRecipe(DenseRecipe):
    name = "nbf-attention"
    head_cls = DimensionAttentionHead
    defaults: dict[str, Any] = {**DENSE_DEFAULTS, "negatives": 15, "margin": 0.2,
                                "lr": 1e-4, "weight_decay": 0.0, "t_max": 20,
                                "eta_min": 1e-6, "batch_size": 4, "epochs": 20,
                                "max_train_records": None}

    def __init__(self, vocab, **params: Any):
        super().__init__(vocab, **params)
        self.head_: DimensionAttentionHead | None = None

    def new_head(self, dim: int) -> DimensionAttentionHead:
        return DimensionAttentionHead(dim)

    def _train_on(self, records: Sequence[Record], emb: np.ndarray, positions: np.ndarray,
                  subject_vectors: np.ndarray, description: str):
        row_of = {int(p): i for i, p in enumerate(positions)}
        gold = [[row_of[p] for p in self.vocab.positions(r.subjects) if p in row_of]
                for r in records]
        keep = [i for i, g in enumerate(gold) if g]
        head = self.new_head(emb.shape[1])
        p = self.params
        losses = train_head(
            head, emb[keep], gold_means([gold[i] for i in keep], subject_vectors),
            subject_vectors, [set(gold[i]) for i in keep], negatives=p["negatives"],
            margin=p["margin"], lr=p["lr"], weight_decay=p["weight_decay"],
            epochs=p["epochs"], batch_size=p["batch_size"], t_max=p["t_max"],
            eta_min=p["eta_min"], seed=p["seed"], description=description)
        return head, losses

    def fit(self, records: Sequence[Record], *, workdir: Path,
            dev: Sequence[Record] | None = None) -> None:
        records = [r for r in records if r.subjects]
        self.positions_ = self.subject_positions(records)  # seen in all of train
        records = records[: self.params["max_train_records"]]
        subject_vectors = self.encode_subjects(self.positions_)
        emb = self.encode_records(records, progress=True)
        self.head_, self.losses_ = self._train_on(records, emb, self.positions_,
                                                  subject_vectors, "training NBF head")
        self.build_index(self.head_.transform(subject_vectors))

    def transform_records(self, emb: np.ndarray, records: Sequence[Record]) -> np.ndarray:
        return self.head_.transform(emb)

    def save(self, path: Path) -> None:
        super().save(path)
        self.head_.save(path / "head")

    def load_state(self, path: Path) -> None:
        super().load_state(path)
        self.head_ = self.head_cls.load(path / "head")
