"""Training loop shared by the frozen-embedding heads (R2 NBF, R3 FocusedEmbTransform).

Anchor = head(record embedding); positive = mean of the gold subjects' frozen embeddings;
K random negative subjects; `MarginLoss`; AdamW + cosine annealing. A plain torch loop:
the inputs are precomputed tensors, so the sentence-transformers trainer (which encodes
text every step) has nothing to add here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from rich.progress import track

from tagalign.train.heads import Head
from tagalign.train.losses import MarginLoss


def gold_means(gold_rows: Sequence[list[int]], subject_vectors: np.ndarray) -> np.ndarray:
    return np.stack([subject_vectors[g].mean(axis=0) for g in gold_rows]).astype(np.float32)


def train_head(head: Head, records: np.ndarray, positives: np.ndarray,
               candidate_vectors: np.ndarray, gold_rows: Sequence[set[int]], *,
               negatives: int, margin: float, lr: float, weight_decay: float, epochs: int,
               batch_size: int, t_max: int | None, eta_min: float, seed: int,
               description: str = "training head") -> list[float]:
    """Returns the mean loss of each epoch. Negatives avoid each record's gold rows."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max or epochs,
                                                       eta_min=eta_min)
    loss_fn = MarginLoss(margin)
    cand = torch.from_numpy(np.ascontiguousarray(candidate_vectors, dtype=np.float32))
    X = torch.from_numpy(np.ascontiguousarray(records, dtype=np.float32))
    P = torch.from_numpy(np.ascontiguousarray(positives, dtype=np.float32))
    n, m = len(X), len(cand)
    losses = []
    head.train()
    for _epoch in track(range(epochs), description=description, transient=True):
        order = rng.permutation(n)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            neg = rng.integers(0, m, size=(len(idx), negatives))
            for row, i in enumerate(idx):  # resample the rare negative that is gold
                for j in range(negatives):
                    while neg[row, j] in gold_rows[i]:
                        neg[row, j] = rng.integers(0, m)
            loss = loss_fn(head(X[idx]), P[idx], cand[torch.from_numpy(neg)])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        sched.step()
        losses.append(total / n)
    head.eval()
    return losses
