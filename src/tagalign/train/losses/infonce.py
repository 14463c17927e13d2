"""InfoNCE over K explicit candidates with a learnable temperature (YNU-HPCC, R1)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from sentence_transformers.base.losses.merged_forward import embed_columns
from torch import Tensor, nn


def info_nce(anchor: Tensor, candidates: Tensor, log_tau: Tensor) -> Tensor:
    """anchor (B, d), candidates (B, K, d) with the positive first → mean loss over B."""
    a = nn.functional.normalize(anchor, dim=-1)
    c = nn.functional.normalize(candidates, dim=-1)
    logits = torch.einsum("bd,bkd->bk", a, c) / log_tau.exp()
    target = torch.zeros(len(a), dtype=torch.long, device=a.device)
    return nn.functional.cross_entropy(logits, target)


class InfoNCELoss(nn.Module):
    def __init__(self, model: Any, temperature: float = 0.05, learnable: bool = True) -> None:
        """
        Temperature-scaled contrastive loss over K candidates per anchor: the positive and
        its own explicit negatives (no in-batch negatives), as in YNU-HPCC's fine-tuned
        Sentence-BERT for SemEval-2025 Task 5 (LLMs4Subjects), where K = 2.

        For an anchor a (the record) with candidates c_1 (positive), c_2 … c_K (negatives):

        ``loss = −log( exp(cos(a, c_1) / τ) / Σ_j exp(cos(a, c_j) / τ) )``

        averaged over the batch. τ starts at ``temperature`` (0.05) and is learned as
        log τ (stays positive), trained with the model: the trainer adds loss parameters
        to the optimizer.

        Args:
            model: SentenceTransformer model
            temperature: initial τ (the inverse of MultipleNegativesRankingLoss' scale).
            learnable: learn τ (True) or keep it fixed.

        References:
            - YNU-HPCC at SemEval-2025 Task 5: contrastive fine-tuning of Sentence-BERT for
              subject tagging (InfoNCE, 1:1 positives and negatives, τ = 0.05 learnable).

        Requirements:
            - One positive and at least one negative per anchor, e.g. a record, one (or all,
              joined) gold subject(s), and a random wrong subject (or as many joined).

        Inputs:
            +-------------------------------------------------+--------+
            | Texts                                           | Labels |
            +=================================================+========+
            | (anchor, positive, negative_1, …) n-tuples      | none   |
            +-------------------------------------------------+--------+

        Relations:
            - :class:`MultipleNegativesRankingLoss` uses the other in-batch candidates as
              negatives and a fixed scale; with K = 2 and no in-batch negatives this loss
              is a softmax over exactly the pair the YNU sampler drew.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
                from tagalign.train.losses import InfoNCELoss

                model = SentenceTransformer("intfloat/multilingual-e5-small")
                train_dataset = Dataset.from_dict({
                    "anchor": ["query: Schimmelpilze an Fachwerk …"],
                    "positive": ["passage: Pilze; Holzschutz"],
                    "negative": ["passage: Epos; Zukunft"],
                })
                loss = InfoNCELoss(model, temperature=0.05)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset,
                                                     loss=loss)
                trainer.train()
        """
        super().__init__()
        self.model = model
        self.log_tau = nn.Parameter(torch.tensor(math.log(temperature)),
                                    requires_grad=learnable)

    @property
    def temperature(self) -> float:
        return float(self.log_tau.detach().exp())

    def forward(self, sentence_features: Iterable[dict[str, Tensor]],
                labels: Tensor | None = None) -> Tensor:
        embeddings = embed_columns(self.model, sentence_features)
        return self.compute_loss_from_embeddings(embeddings)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor]) -> Tensor:
        """embeddings: [anchor, positive, negative_1, …], each (B, d)."""
        if len(embeddings) < 3:
            raise ValueError(f"{type(self).__name__} needs (anchor, positive, negative…) columns, "
                             f"got {len(embeddings)}")
        return info_nce(embeddings[0], torch.stack(embeddings[1:], dim=1), self.log_tau)

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "learnable": self.log_tau.requires_grad}
