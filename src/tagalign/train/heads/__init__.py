"""Trainable heads over frozen embeddings, saved as config.json + model.safetensors."""

from tagalign.train.heads.base import Head
from tagalign.train.heads.focused import FocusedEmbTransform
from tagalign.train.heads.nbf import DimensionAttentionHead

HEADS = {"nbf": DimensionAttentionHead, "focused": FocusedEmbTransform}

__all__ = ["HEADS", "DimensionAttentionHead", "FocusedEmbTransform", "Head"]
