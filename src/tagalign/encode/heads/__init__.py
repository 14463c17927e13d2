"""Trainable heads over frozen embeddings, saved as config.json + model.safetensors."""

from tagalign.encode.heads.base import SUBJECT_SPACES, Head, check_subject_space, resolve_device
from tagalign.encode.heads.focused import FocusedEmbTransform
from tagalign.encode.heads.nbf import DimensionAttentionHead

HEADS = {"nbf": DimensionAttentionHead, "focused": FocusedEmbTransform}

__all__ = ["HEADS", "SUBJECT_SPACES", "DimensionAttentionHead", "FocusedEmbTransform", "Head",
           "check_subject_space", "resolve_device"]
