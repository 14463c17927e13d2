"""Margin loss with cosine distance against several negatives (NBF; LLMs4Subjects R3).

    L = Σ_i max(0, m + d(a, p) − d(a, n_i)),   d(x, y) = 1 − cos(x, y),   m = 0.2

averaged over the batch. The anchor a is the transformed record embedding, p the mean of
its gold subjects' embeddings, n_i random subjects (15 in NBF). The heads train on frozen,
precomputed embeddings, so this loss takes tensors rather than a sentence-transformers
model (re-encoding through the model every step is what the recipes avoid).

Example::

    loss = MarginLoss(margin=0.2)
    value = loss(head(records), positives, negatives)   # (B,d), (B,d), (B,K,d)
"""

from __future__ import annotations

from torch import Tensor, nn


def cosine_distance(x: Tensor, y: Tensor) -> Tensor:
    return 1 - nn.functional.cosine_similarity(x, y, dim=-1)


class MarginLoss(nn.Module):
    def __init__(self, margin: float = 0.2):
        super().__init__()
        self.margin = margin

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor) -> Tensor:
        d_pos = cosine_distance(anchor, positive).unsqueeze(1)  # (B, 1)
        d_neg = cosine_distance(anchor.unsqueeze(1), negatives)  # (B, K)
        return (self.margin + d_pos - d_neg).clamp(min=0).sum(dim=1).mean()
