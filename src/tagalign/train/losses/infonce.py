"""InfoNCE over K candidates with a learnable temperature (YNU-HPCC, SemEval-2025 Task 5).

For an anchor a with candidates c_1 (the positive) … c_K (negatives):

    L = −log( exp(cos(a, c_1)/τ) / Σ_j exp(cos(a, c_j)/τ) )

with τ learnable (stored as log τ), starting at 0.05. YNU uses K = 2: each record with
one gold subject (or all gold subjects joined, "aggregate") and one random wrong one.
sentence-transformers' MultipleNegativesRankingLoss uses in-batch negatives and a fixed
scale, hence this module.

Inputs: columns ``(anchor, positive, negative_1, …)``; no label column.

Example::

    loss = InfoNCELoss(model, temperature=0.05, learnable=True)
    trainer = SentenceTransformerTrainer(model=model, train_dataset=ds, loss=loss)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn


def info_nce(anchor: Tensor, candidates: Tensor, log_tau: Tensor) -> Tensor:
    """anchor (B, d), candidates (B, K, d) with the positive first → mean loss."""
    a = nn.functional.normalize(anchor, dim=-1)
    c = nn.functional.normalize(candidates, dim=-1)
    logits = torch.einsum("bd,bkd->bk", a, c) / log_tau.exp()
    target = torch.zeros(len(a), dtype=torch.long, device=a.device)
    return nn.functional.cross_entropy(logits, target)


class InfoNCELoss(nn.Module):
    def __init__(self, model, temperature: float = 0.05, learnable: bool = True):
        super().__init__()
        self.model = model
        log_tau = torch.tensor(math.log(temperature))
        self.log_tau = nn.Parameter(log_tau) if learnable else nn.Parameter(log_tau,
                                                                            requires_grad=False)

    @property
    def temperature(self) -> float:
        return float(self.log_tau.exp())

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
                ) -> Tensor:
        emb = [self.model(f)["sentence_embedding"] for f in sentence_features]
        return info_nce(emb[0], torch.stack(emb[1:], dim=1), self.log_tau)

    def get_config_dict(self) -> dict:
        return {"temperature": self.temperature, "learnable": self.log_tau.requires_grad}
