"""Margin loss with cosine distance against several negatives (NBF, R2; LLMs4Subjects, R3).

    L = 1/B · Σ_b Σ_i max(0, m + d(a_b, p_b) − d(a_b, n_bi)),   d(x, y) = 1 − cos(x, y)

with m = 0.2. In both papers the anchor a is the head-transformed record embedding, p the
mean of the record's gold subject embeddings and n_1 … n_K random subjects (K = 15). Note
the sum over negatives (not a mean), as in both papers' code.

Two entry points, like sentence-transformers' losses:

* `MarginLoss` takes tensors — what the heads train with, since their inputs are frozen,
  precomputed embeddings and re-encoding text every step is what R2/R3 avoid::

      loss = MarginLoss(margin=0.2)
      value = loss(head(records), positives, negatives)   # (B, d), (B, d), (B, K, d)

* `MultipleNegativesMarginLoss` takes a SentenceTransformer and the trainer's features,
  for fine-tuning an encoder with the same objective. Inputs: columns
  ``(anchor, positive, negative_1, …, negative_K)`` of texts; no label column::

      loss = MultipleNegativesMarginLoss(model, margin=0.2)
      trainer = SentenceTransformerTrainer(model=model, train_dataset=ds, loss=loss)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn


def cosine_distance(x: Tensor, y: Tensor) -> Tensor:
    return 1 - nn.functional.cosine_similarity(x, y, dim=-1)


def margin_loss(anchor: Tensor, positive: Tensor, negatives: Tensor, margin: float = 0.2
                ) -> Tensor:
    """anchor (B, d), positive (B, d), negatives (B, K, d) → the batch mean of L."""
    d_pos = cosine_distance(anchor, positive).unsqueeze(1)   # (B, 1)
    d_neg = cosine_distance(anchor.unsqueeze(1), negatives)  # (B, K)
    return (margin + d_pos - d_neg).clamp(min=0).sum(dim=1).mean()


class MarginLoss(nn.Module):
    def __init__(self, margin: float = 0.2):
        super().__init__()
        self.margin = margin

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor) -> Tensor:
        return margin_loss(anchor, positive, negatives, self.margin)

    def get_config_dict(self) -> dict[str, Any]:
        return {"margin": self.margin}


class MultipleNegativesMarginLoss(nn.Module):
    def __init__(self, model: nn.Module, margin: float = 0.2):
        super().__init__()
        self.model = model
        self.margin = margin

    def forward(self, sentence_features: Iterable[dict[str, Tensor]],
                labels: Tensor | None = None) -> Tensor:
        emb = [self.model(f)["sentence_embedding"] for f in sentence_features]
        if len(emb) < 3:
            raise ValueError("expected columns (anchor, positive, negative_1, …)")
        return margin_loss(emb[0], emb[1], torch.stack(emb[2:], dim=1), self.margin)

    def get_config_dict(self) -> dict[str, Any]:
        return {"margin": self.margin}

    @property
    def citation(self) -> str:
        return ("NBF at SemEval-2025 Task 5 (LLMs4Subjects); "
                "LLMs4Subjects FocusedEmbTransform repository")
