"""Mean over the target's sub-tokens: the tokens between the ``<t>`` and ``</t>`` markers.

A sentence-transformers module (saved as a config in its own folder, loaded by its import
path, no weights), used in place of `Pooling` when ``pooling="target"``. The organisers'
CoMeDi baseline pools the target's sub-tokens the same way.
"""

from __future__ import annotations

import torch
from sentence_transformers.base.modules.module import Module


class TargetPooling(Module):
    """sentence_embedding = mean of token_embeddings strictly inside the markers; a text
    whose markers are missing falls back to the mean over all its tokens."""

    config_keys: list[str] = ["dimension", "open_id", "close_id"]

    def __init__(self, dimension: int, open_id: int, close_id: int):
        super().__init__()
        self.dimension = int(dimension)
        self.open_id = int(open_id)
        self.close_id = int(close_id)

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        ids, tokens = features["input_ids"], features["token_embeddings"]
        attention = features["attention_mask"].to(tokens.dtype)
        is_open = ids == self.open_id
        depth = is_open.long().cumsum(1) - (ids == self.close_id).long().cumsum(1)
        inside = ((depth > 0) & ~is_open).to(tokens.dtype) * attention
        empty = inside.sum(1, keepdim=True) == 0
        weights = torch.where(empty, attention, inside)
        summed = (tokens * weights.unsqueeze(-1)).sum(1)
        features["sentence_embedding"] = summed / weights.sum(1, keepdim=True).clamp(min=1e-9)
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
