"""NBF's dimension-as-token attention head (SemEval-2025 Task 5), exactly as published.

transform(m): the d-vector becomes d tokens of size 1 → Linear(1→16) → one pre-norm
Transformer encoder layer (2 heads × 8 dims, FFN 16→64→16, ReLU, dropout 0.03, residual
connections) → Linear(16→1) → back to a d-vector → MLP d→256→256→d (ReLU, dropout 0.03).
No library ships it, hence hand-written.
"""

from __future__ import annotations

from torch import Tensor, nn

from tagalign.encode.heads.base import Head


class DimensionAttentionHead(Head):
    config_keys = ("dim", "token_dim", "heads", "ffn", "hidden", "dropout")

    def __init__(self, dim: int, token_dim: int = 16, heads: int = 2, ffn: int = 64,
                 hidden: int = 256, dropout: float = 0.03):
        super().__init__()
        self.dim, self.token_dim, self.heads = dim, token_dim, heads
        self.ffn, self.hidden, self.dropout = ffn, hidden, dropout
        self.embed = nn.Linear(1, token_dim)
        self.layer = nn.TransformerEncoderLayer(token_dim, heads, ffn, dropout,
                                                activation="relu", batch_first=True,
                                                norm_first=True)
        self.unembed = nn.Linear(token_dim, 1)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, dim))

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.embed(x.unsqueeze(-1))          # (B, d, 16)
        tokens = self.layer(tokens)                    # attention across dimensions
        return self.mlp(self.unembed(tokens).squeeze(-1))
