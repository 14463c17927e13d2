"""sentence-transformers ``StaticEmbedding`` models: one vector per token, mean-pooled.

The one wrapper of such a model, whether it was just trained (the hybrid recipe's encoder,
`tagalign.train.static_model`), saved inside a project (``PROJECT/model/encoder``) or
named as ``static:<folder>``. CPU by default: a lookup and a mean cost less than moving
the batch to a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tagalign.encode.base import Encoder, Kind, normalise, register_encoder
from tagalign.encode.transformer import STEncoder
from tagalign.params import Fraction, NonNegative, PartConfig, Positive, PositiveFloat


@dataclass(frozen=True)
class StaticEncoderConfig(PartConfig):
    """How the hybrid trains its static encoder (`tagalign.train.static_model`; here, beside
    the model, so the recipe reads its ranges without importing training code): a WordPiece
    vocabulary of ``vocab_size`` tokens, ``dim`` dimensions, ``epochs`` epochs of
    ``batch_size`` pairs at learning rate ``lr``; ``label_pairs``: English ↔ German label
    pairs too; ``hard_negatives``: mined hard negatives per pair after the first epoch
    (0: in-batch only); ``max_records``: the training records it learns from at most (a
    seeded sample of them when there are more: its cost grows with them, its vocabulary
    and quality hardly past 100,000, docs/scaling.md; None: all); ``label_dropout``: the
    share of the records' subjects (drawn with ``seed``) whose record ↔ label pairs are
    left out, so their label rows are made as an unseen heading's are (issue 66: label-side
    dropout, `tagalign.train.static_model.training_pairs`); ``seed``: every random choice."""

    dim: Positive = 384
    vocab_size: Positive = 40_000
    epochs: Positive = 3
    batch_size: Positive = 256
    lr: PositiveFloat = 0.05
    label_pairs: bool = True
    hard_negatives: NonNegative = 1
    max_records: Positive | None = 100_000
    label_dropout: Fraction = 0.0
    seed: NonNegative = 13

    kind: ClassVar[str] = "encoder config"


@register_encoder
class StaticEmbeddingEncoder(STEncoder):
    """A sentence-transformers ``StaticEmbedding`` model (no sequence-length cap)."""

    name = "static"

    def __init__(self, model_or_path: Any, device: str | None = None, **kw: Any):
        super().__init__(model_or_path, max_seq_length=None, device=device or "cpu", **kw)

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage", batch_size: int = 512,
               show_progress: bool = False) -> np.ndarray:
        # larger batches than a transformer's: a batch is a bag of token ids, no padding
        if len(texts) > batch_size or show_progress:
            return super().encode(texts, kind=kind, batch_size=batch_size,
                                  show_progress=show_progress)
        # one batch (a served record): the model's own tokenizer and forward pass, without
        # the per-call bookkeeping of SentenceTransformer.encode (length sorting, batching,
        # modality checks), which costs more than the lookup and mean do; the same
        # computation, so the same vectors
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        import torch

        prefix = self.prompts.get(kind, "")
        with torch.inference_mode():
            features = self._features([prefix + t for t in texts])
            emb = self.model.forward(features)["sentence_embedding"]
        return normalise(emb.numpy())

    def _features(self, texts: list[str]) -> dict[str, Any]:
        """``StaticEmbedding.preprocess``'s features (the same token ids and offsets) with
        the ids joined by `itertools.chain` in C: its list comprehension over every token
        was 5 % of a batch suggest's time (py-spy, full-train hybrid, one thread)."""
        import torch

        module = self.model[0]
        ids = [e.ids for e in module.tokenizer.encode_batch(texts, add_special_tokens=False)]
        lens = np.fromiter(map(len, ids), np.int64, len(ids))
        flat = np.fromiter(chain.from_iterable(ids), np.int64, int(lens.sum()))
        offsets = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.int64)
        return {"input_ids": torch.from_numpy(flat), "offsets": torch.from_numpy(offsets)}

    def save(self, path: Path) -> None:
        self.model.save(str(path), safe_serialization=True)

    @classmethod
    def load(cls, path: Path) -> Encoder:
        return cls(str(path))
