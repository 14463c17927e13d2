"""FocusedEmbTransform (LLMs4Subjects repository): an MLP with per-dimension attention.

    y = W2 · ReLU(W1 · x + b1) + b2,    y' = y ⊙ α,   α ∈ R^d learnable, initialised to 1

``residual=True`` (issue 21, not in the repository): y = x + W2 · ReLU(W1 · x + b1) + b2
with W2, b2 starting at zero, so the untrained head is the identity (the raw encoder).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tagalign.encode.heads.base import Head, zero_last_layer


class FocusedEmbTransform(Head):
    config_keys = ("dim", "hidden", "residual")

    def __init__(self, dim: int, hidden: int = 1024, residual: bool = False):
        super().__init__()
        self.dim, self.hidden, self.residual = dim, hidden, residual
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.alpha = nn.Parameter(torch.ones(dim))
        if residual:
            zero_last_layer(self.mlp)

    def forward(self, x: Tensor) -> Tensor:
        y = self.mlp(x)
        return (x + y if self.residual else y) * self.alpha
