"""HeroCon: the multi-label supervised contrastive loss of mCPT (recipe R5).

sentence-transformers ships single-label contrastive losses (``BatchAllTripletLoss``,
``SupervisedContrastive``-like batch losses take one class id per text); it has no loss for
samples that carry *several* labels, weighted by how much their label sets agree — hence
this module, written like one of the library's losses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn


def hamming_matrix(labels: Tensor) -> Tensor:
    """(B, C) multi-hot → (B, B) Hamming distances between the label vectors."""
    y = labels.float()
    return y @ (1 - y).T + (1 - y) @ y.T


def herocon(embeddings: Tensor, labels: Tensor, temperature: float = 1.0) -> Tensor:
    """HeroCon over a batch; see `HeroConLoss` for the formula. 0 when no class has two
    positive samples in the batch (still connected to the graph)."""
    z = nn.functional.normalize(embeddings, dim=-1)
    f = torch.exp(z @ z.T / temperature)
    y = labels.float()
    n_classes = y.shape[1]
    ham = hamming_matrix(y)
    sigma = 1 - ham / n_classes
    gamma = ham
    terms = []
    eye = torch.eye(len(y), dtype=torch.bool, device=y.device)
    for c in range(n_classes):
        pos = y[:, c] > 0
        n_pos = int(pos.sum())
        if n_pos < 2:
            continue
        neg = ~pos
        n_neg = int(neg.sum())
        neg_sum = (gamma * f * neg[None, :].float()).sum(dim=1)  # Σ_k∈N(c) γ_ik f(i,k), per i
        num = sigma * f                                           # σ_ij f(i,j)
        delta = (num + neg_sum[:, None]) / (n_neg + 1)
        pair = pos[:, None] & pos[None, :] & ~eye
        terms.append((-torch.log(num[pair] / delta[pair])).mean())
    if not terms:
        return embeddings.sum() * 0.0
    return torch.stack(terms).mean()


class HeroConLoss(nn.Module):
    def __init__(self, model: Any, temperature: float = 1.0) -> None:
        """
        HeroCon (heterogeneous-label contrastive loss), as used by mCPT (label-aware
        contrastive pre-training, SemEval-2023 Task 3) for multi-label classification with
        few samples per class. For each class c present in the batch, with P(c) the samples
        labelled c and N(c) the others, over ordered pairs i ≠ j of P(c):

        ``L_c = −mean_{i,j∈P(c)} log( σ_ij·f(i,j) / δ_ij )``,
        ``δ_ij = ( σ_ij·f(i,j) + Σ_{k∈N(c)} γ_ik·f(i,k) ) / ( |N(c)| + 1 )``,
        ``σ_ij = 1 − Hamming(Y_i, Y_j) / |C|``, ``γ_ik = Hamming(Y_i, Y_k)``,

        and ``L = mean_c L_c`` over the classes with at least two positives. Positives with
        more labels in common are pulled harder (σ), negatives that differ in more labels
        are pushed harder (γ). ``f(i, j) = exp(cos(z_i, z_j) / τ)`` with τ = 1: the cosine
        the paper names, exponentiated as in supervised contrastive losses so that the
        ratio stays positive and the log defined (a raw cosine can be ≤ 0).

        mCPT trains ``L = L_BCE + α·L_HeroCon`` with α = 0.01 (see
        `tagalign.classify.label_contrastive`).

        Args:
            model: SentenceTransformer model (its ``sentence_embedding`` output is used
                as is: mean pooling, no normalisation).
            temperature: τ in f.

        References:
            - Zheng et al., "Contrastive Learning with Heterogeneous Labels" (HeroCon).
            - mCPT at SemEval-2023 Task 3: multilingual label-aware contrastive
              pre-training for multi-label classification with few samples.

        Inputs:
            +------------------+------------------------------------------+
            | Texts            | Labels                                   |
            +==================+==========================================+
            | single sentences | (B, C) multi-hot label matrix, 0/1       |
            +------------------+------------------------------------------+

        Example:
            ::

                loss = HeroConLoss(model)
                features = model.tokenize(texts)
                value = loss([features], torch.tensor(multi_hot))
        """
        super().__init__()
        self.model = model
        self.temperature = temperature

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor
                ) -> Tensor:
        features = next(iter(sentence_features))
        embeddings = self.model(features)["sentence_embedding"]
        return herocon(embeddings, labels, self.temperature)

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature}
