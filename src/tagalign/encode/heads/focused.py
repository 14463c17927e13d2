"""FocusedEmbTransform (LLMs4Subjects repository): an MLP with per-dimension attention.

    y = W2 · ReLU(W1 · x + b1) + b2,    y' = y ⊙ α,   α ∈ R^d learnable, initialised to 1
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tagalign.encode.heads.base import Head


class FocusedEmbTransform(Head):
    config_keys = ("dim", "hidden")

    def __init__(self, dim: int, hidden: int = 1024):
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.alpha = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.mlp(x) * self.alpha
