"""Training loop shared by the frozen-embedding heads (R2 NBF, R3 FocusedEmbTransform).

Anchor a = T(record embedding); positive p = mean of the gold subjects' frozen embeddings;
K random negative subjects n_i; `MarginLoss`. Where the subjects live is ``subject_space``
(NBF gives two self-consistent readings; train and index must use the same one):

* ``fixed`` (NBF §3; the default here and R2's): only records pass through T; the loss is on
  d(T(m), p) and d(T(m), n_i) and the index holds the frozen subject vectors S;
* ``siamese`` (NBF §4): records, positives and negatives all pass through T; the loss is
  on d(T(m), T(p)) and d(T(m), T(n_i)) and the index holds T(S);
* ``mixed`` (an ablation only): trained as ``fixed`` but indexed as T(S) — the mismatch
  the recipes shipped before issue 13 (the head never sees a subject in training).

The two papers differ otherwise only in the optimiser and schedule, which are therefore
parameters:

* NBF (R2): AdamW(lr 1e-4, wd 0) + CosineAnnealingLR(T_max 20, eta_min 1e-6), batch 4;
* LLMs4Subjects (R3): Adam(lr 1e-4, wd 1e-5) + StepLR(step 5, gamma 0.5), batch 32.

A plain torch loop: the inputs are precomputed tensors, so the sentence-transformers
trainer (which encodes text every step) has nothing to add here. Runs on CUDA when asked
(``device="auto"`` picks it when available), where the published batch-4 NBF schedule
takes minutes instead of an hour on two CPU cores.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from rich.progress import Progress

from tagalign.encode.heads import SUBJECT_SPACES, Head, check_subject_space, resolve_device
from tagalign.io import atomic_dir
from tagalign.train.losses import MarginLoss


#: subject_space → (subjects pass through T in training, the index holds T(S))
@dataclass(frozen=True)
class HeadTrainingConfig:
    """Hyperparameters of `train_head`; the recipes fill it from their ``params``."""

    negatives: int = 15
    margin: float = 0.2
    optimizer: str = "adamw"        # "adamw" (NBF) or "adam" (LLMs4Subjects)
    lr: float = 1e-4
    weight_decay: float = 0.0
    scheduler: str = "cosine"       # "cosine" (T_max, eta_min) or "step" (step_size, gamma)
    t_max: int | None = None        # None: the number of epochs
    eta_min: float = 1e-6
    step_size: int = 5
    gamma: float = 0.5
    epochs: int = 20
    batch_size: int = 4
    seed: int = 13
    device: str = "cpu"             # "cpu", "cuda" or "auto"
    subject_space: str = "fixed"    # see SUBJECT_SPACES

    @property
    def siamese(self) -> bool:
        """Do positives and negatives pass through the head in training?"""
        return SUBJECT_SPACES[check_subject_space(self.subject_space)][0]

    @classmethod
    def from_params(cls, params: dict) -> HeadTrainingConfig:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in params.items() if k in names})


def gold_means(gold_rows: Sequence[list[int]], subject_vectors: np.ndarray) -> np.ndarray:
    """p_i = mean of the gold subjects' frozen embeddings (the anchor's positive)."""
    return np.stack([subject_vectors[g].mean(axis=0) for g in gold_rows]).astype(np.float32)


def sample_negatives(rng: np.random.Generator, n_candidates: int, gold: Sequence[set[int]],
                     k: int) -> np.ndarray:
    """(len(gold), k) uniform candidate rows, redrawing the rare one that is gold."""
    neg = rng.integers(0, n_candidates, size=(len(gold), k))
    for row, g in enumerate(gold):
        bad = [j for j in range(k) if neg[row, j] in g]
        while bad:
            neg[row, bad] = rng.integers(0, n_candidates, size=len(bad))
            bad = [j for j in bad if neg[row, j] in g]
    return neg


def _optimiser(head: Head, cfg: HeadTrainingConfig):
    kinds = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}
    if cfg.optimizer not in kinds:
        raise ValueError(f"optimizer must be one of {sorted(kinds)}, not {cfg.optimizer!r}")
    opt = kinds[cfg.optimizer](head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.scheduler == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.t_max or cfg.epochs,
                                                           eta_min=cfg.eta_min)
    elif cfg.scheduler == "step":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.step_size, gamma=cfg.gamma)
    else:
        raise ValueError(f"scheduler must be 'cosine' or 'step', not {cfg.scheduler!r}")
    return opt, sched


def _save_checkpoint(folder: Path, head: Head, opt, sched, rng: np.random.Generator,
                     losses: list[float], cfg: HeadTrainingConfig) -> None:
    """After each epoch: head weights, optimiser/scheduler state, both RNGs, losses —
    everything a resumed run needs to continue exactly as if it had not stopped."""
    with atomic_dir(folder) as tmp:
        head.save(tmp / "head")
        # tensors and plain containers only: read back with torch.load(weights_only=True)
        torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "torch_rng": torch.get_rng_state()}, tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({
            "epochs_done": len(losses), "losses": losses, "config": asdict(cfg),
            "numpy_rng": rng.bit_generator.state}))


def _load_checkpoint(folder: Path, head: Head, opt, sched, rng: np.random.Generator,
                     cfg: HeadTrainingConfig) -> list[float]:
    state = json.loads((folder / "state.json").read_text())
    saved = {k: v for k, v in state["config"].items() if k not in ("epochs", "device")}
    if saved != {k: v for k, v in asdict(cfg).items() if k in saved}:
        raise ValueError(f"{folder}: checkpoint of another training configuration; "
                         "delete it or use another folder")
    head.load_state_dict(type(head).load(folder / "head").state_dict())
    extra = torch.load(folder / "optimizer.pt", weights_only=True)
    opt.load_state_dict(extra["optimizer"])
    sched.load_state_dict(extra["scheduler"])
    torch.set_rng_state(extra["torch_rng"])
    rng.bit_generator.state = state["numpy_rng"]
    return list(state["losses"])


def train_head(head: Head, records: np.ndarray, positives: np.ndarray,
               candidate_vectors: np.ndarray, gold_rows: Sequence[set[int]],
               cfg: HeadTrainingConfig, description: str = "training head",
               show_progress: bool = True, checkpoint: Path | None = None) -> list[float]:
    """Train ``head`` in place; returns the mean loss of each epoch (schedule steps per epoch).

    ``candidate_vectors`` are the frozen subject embeddings the negatives are drawn from;
    ``gold_rows[i]`` the rows of record i's gold subjects, never drawn as its negatives.
    With ``cfg.siamese`` the positives and negatives pass through the head too (one
    forward over anchors, positives and negatives together, so dropout and gradients treat
    them alike). With ``checkpoint`` (a folder) the state is saved after every epoch and
    a rerun continues from the last finished epoch with the same result as an
    uninterrupted run.
    """
    siamese = cfg.siamese
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    device = resolve_device(cfg.device)
    head.to(device)
    opt, sched = _optimiser(head, cfg)
    loss_fn = MarginLoss(cfg.margin)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)

    cand, X, P = tensor(candidate_vectors), tensor(records), tensor(positives)
    n, m = len(X), len(cand)
    steps = -(-n // cfg.batch_size)
    losses: list[float] = []
    if checkpoint is not None and (Path(checkpoint) / "state.json").exists():
        losses = _load_checkpoint(Path(checkpoint), head, opt, sched, rng, cfg)
    head.train()
    with Progress(transient=True, disable=not show_progress) as bar:
        task = bar.add_task(description, total=cfg.epochs * steps,
                            completed=len(losses) * steps)
        for _epoch in range(len(losses), cfg.epochs):
            order = rng.permutation(n)
            total = torch.zeros((), device=device)  # summed on device: no sync per step
            for start in range(0, n, cfg.batch_size):
                idx = order[start:start + cfg.batch_size]
                neg = sample_negatives(rng, m, [gold_rows[i] for i in idx], cfg.negatives)
                rows = torch.from_numpy(idx).to(device)
                anchor, pos = X[rows], P[rows]
                negs = cand[torch.from_numpy(neg).to(device)]        # (B, K, d)
                if siamese:
                    b, k, d = negs.shape
                    out = head(torch.cat([anchor, pos, negs.reshape(b * k, d)]))
                    anchor, pos, negs = out[:b], out[b:2 * b], out[2 * b:].reshape(b, k, -1)
                else:
                    anchor = head(anchor)
                loss = loss_fn(anchor, pos, negs)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += loss.detach() * len(idx)
                bar.advance(task)
            sched.step()
            losses.append(float(total) / n)
            if checkpoint is not None:
                _save_checkpoint(Path(checkpoint), head, opt, sched, rng, losses, cfg)
    head.eval()
    head.to("cpu")
    return losses
