"""NBF's dimension-as-token attention head (SemEval-2025 Task 5), exactly as published.

transform(m): the d-vector becomes d tokens of size 1 → Linear(1→16) → one pre-norm
Transformer encoder layer (2 heads × 8 dims, FFN 16→64→16, ReLU, dropout 0.03, residual
connections) → Linear(16→1) → back to a d-vector → MLP d→256→256→d (ReLU, dropout 0.03).
No library ships it, hence hand-written.

``residual=True`` (issue 21, not in the paper): the output is x + head(x) and the MLP's last
layer starts at zero, so the untrained head is the identity — step 0 ranks as the raw
encoder does, and training moves records from there instead of having to map them into the
frozen subject space from a random start.

The encoder layer's weights are `nn.TransformerEncoderLayer`'s (same names, so saved heads
load as before), but its forward is written out with
`torch.nn.functional.scaled_dot_product_attention`: in eval mode it equals the module's;
in training, ``attention_dropout`` (the paper's 0.03 by default, what the module applies to
the attention weights) is separate from the residual/FFN ``dropout``. On a CPU any attention
dropout forces SDPA's math path (the 512 × 512 weights and their mask are materialised):
measured at batch 4 on 2 cores, the attention's forward + backward takes ~38 ms with it and
~11 ms without (`benchmarks/nbf_step.py` of 6a2d4a2).
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from tagalign.encode.heads.base import Head, zero_last_layer


class DimensionAttentionHead(Head):
    config_keys = ("dim", "token_dim", "heads", "ffn", "hidden", "dropout", "residual",
                   "attention_dropout")

    def __init__(self, dim: int, token_dim: int = 16, heads: int = 2, ffn: int = 64,
                 hidden: int = 256, dropout: float = 0.03, residual: bool = False,
                 attention_dropout: float | None = None):
        super().__init__()
        self.dim, self.token_dim, self.heads = dim, token_dim, heads
        self.ffn, self.hidden, self.dropout = ffn, hidden, dropout
        self.residual = residual
        self.attention_dropout = dropout if attention_dropout is None else attention_dropout
        self.embed = nn.Linear(1, token_dim)
        self.layer = nn.TransformerEncoderLayer(token_dim, heads, ffn, dropout,
                                                activation="relu", batch_first=True,
                                                norm_first=True)
        self.unembed = nn.Linear(token_dim, 1)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, dim))
        if residual:
            zero_last_layer(self.mlp)

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.embed(x.unsqueeze(-1))          # (B, d, 16)
        tokens = self.encoder_layer(tokens)            # attention across dimensions
        out = self.mlp(self.unembed(tokens).squeeze(-1))
        return x + out if self.residual else out

    def encoder_layer(self, t: Tensor) -> Tensor:
        """`nn.TransformerEncoderLayer`'s pre-norm forward on its own weights, with SDPA."""
        layer, (b, n, e) = self.layer, t.shape
        qkv = F.linear(layer.norm1(t), layer.self_attn.in_proj_weight,
                       layer.self_attn.in_proj_bias)
        q, k, v = qkv.view(b, n, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attention_dropout if self.training else 0.0)
        t = t + layer.dropout1(layer.self_attn.out_proj(a.transpose(1, 2).reshape(b, n, e)))
        ff = layer.linear2(layer.dropout(layer.activation(layer.linear1(layer.norm2(t)))))
        return t + layer.dropout2(ff)
