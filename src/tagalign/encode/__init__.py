"""Sentence encoders, an embedding cache and the text each side is encoded from."""

from tagalign.encode import light, static, transformer  # noqa: F401 - registration
from tagalign.encode.base import ENCODERS, Encoder, get_encoder, register_encoder
from tagalign.encode.cache import EmbeddingCache
from tagalign.encode.texts import record_texts, subject_texts

__all__ = ["ENCODERS", "EmbeddingCache", "Encoder", "get_encoder", "record_texts",
           "register_encoder", "subject_texts"]
