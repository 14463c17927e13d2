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
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from tagalign.encode.base import log_progress
from tagalign.encode.heads import SUBJECT_SPACES, Head, resolve_device
from tagalign.encode.heads.config import HeadTrainingConfig
from tagalign.io import atomic_dir
from tagalign.train.losses import MarginLoss

log = logging.getLogger(__name__)


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


def gold_array(gold: Sequence[set[int]]) -> np.ndarray:
    """Gold rows padded with -1 into one (n, max gold) array, for vectorised checks."""
    width = max((len(g) for g in gold), default=0) or 1
    out = np.full((len(gold), width), -1, dtype=np.int64)
    for i, g in enumerate(gold):
        out[i, :len(g)] = sorted(g)
    return out


def epoch_negatives(rng: np.random.Generator, n_candidates: int, gold: np.ndarray,
                    k: int) -> np.ndarray:
    """`sample_negatives` for a whole epoch at once: (len(gold), k) uniform candidate rows,
    ``gold`` padded as by `gold_array`; the rare draw that is gold is redrawn, vectorised."""
    neg = rng.integers(0, n_candidates, size=(len(gold), k))
    bad = (neg[:, :, None] == gold[:, None, :]).any(-1)
    while bad.any():
        neg[bad] = rng.integers(0, n_candidates, size=int(bad.sum()))
        bad = (neg[:, :, None] == gold[:, None, :]).any(-1)
    return neg


def _normalise(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True).clip(1e-12)


def top_candidates(queries: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """(len(queries), k) rows of the ``candidates`` nearest by cosine (exact FAISS search)."""
    import faiss

    index = faiss.IndexFlatIP(candidates.shape[1])
    index.add(np.ascontiguousarray(_normalise(candidates), dtype=np.float32))
    return index.search(np.ascontiguousarray(_normalise(queries), dtype=np.float32),
                        min(k, len(candidates)))[1].astype(np.int64)


def hard_pool(records: np.ndarray, candidates: np.ndarray, gold: np.ndarray,
              size: int) -> np.ndarray:
    """Per record the raw encoder's ``size`` best-ranked candidates that are not gold:
    (n, size); a short row (fewer candidates than asked) is -1-padded."""
    top = top_candidates(records, candidates, size + gold.shape[1])
    is_gold = (top[:, :, None] == gold[:, None, :]).any(-1) | (top < 0)
    keep = np.argsort(is_gold, axis=1, kind="stable")[:, :size]  # non-gold first, in order
    pool = np.take_along_axis(top, keep, axis=1)
    pool[np.take_along_axis(is_gold, keep, axis=1)] = -1
    return pool


def recall_at(queries: np.ndarray, candidates: np.ndarray, gold: Sequence[set[int]],
              ks: Sequence[int] = (5, 10, 15, 20), rows: np.ndarray | None = None) -> float:
    """avg R@ks of ranking ``candidates`` by cosine for each query (early stopping's score);
    ``rows``: the candidate rows ``candidates`` hold, when a subset."""
    top = top_candidates(queries, candidates, max(ks))
    if rows is not None:
        top = rows[top]
    hits = np.array([[r in g for r in row] for row, g in zip(top, gold, strict=True)])
    sizes = np.array([max(len(g), 1) for g in gold])
    return float(np.mean([(hits[:, :k].sum(1) / sizes).mean() for k in ks]))


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
                     losses: list[float], cfg: HeadTrainingConfig, history: dict,
                     best: dict[str, torch.Tensor] | None) -> None:
    """After each epoch: head weights, optimiser/scheduler state, both RNGs, losses, the
    early-stopping scores and best weights — everything a resumed run needs to continue
    exactly as if it had not stopped."""
    with atomic_dir(folder) as tmp:
        head.save(tmp / "head")
        # tensors and plain containers only: read back with torch.load(weights_only=True)
        torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "torch_rng": torch.get_rng_state(), "best": best or {}},
                   tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({
            "epochs_done": len(losses), "losses": losses, "config": asdict(cfg),
            "history": history, "numpy_rng": rng.bit_generator.state}))


def _load_checkpoint(folder: Path, head: Head, opt, sched, rng: np.random.Generator,
                     cfg: HeadTrainingConfig, history: dict
                     ) -> tuple[list[float], dict[str, torch.Tensor] | None]:
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
    history.update(state.get("history", {}))
    return list(state["losses"]), extra.get("best") or None


@torch.no_grad()
def _apply(head: Head, x: torch.Tensor, batch_size: int = 512) -> np.ndarray:
    """T(x) in eval mode, batched, as numpy (the head's training mode is restored)."""
    was = head.training
    head.eval()
    out = torch.cat([head(x[i:i + batch_size]) for i in range(0, len(x), batch_size)])
    head.train(was)
    return out.float().cpu().numpy()


def train_head(head: Head, records: np.ndarray, positives: np.ndarray,
               candidate_vectors: np.ndarray, gold_rows: Sequence[set[int]],
               cfg: HeadTrainingConfig, description: str = "training head",
               show_progress: bool = True, checkpoint: Path | None = None,
               history: dict | None = None) -> list[float]:
    """Train ``head`` in place; returns the mean loss of each epoch (schedule steps per epoch).

    ``candidate_vectors`` are the frozen subject embeddings the negatives are drawn from;
    ``gold_rows[i]`` the rows of record i's gold subjects, never drawn as its negatives.
    With ``cfg.siamese`` the positives and negatives pass through the head too (one
    forward over anchors, positives and negatives together, so dropout and gradients treat
    them alike). With ``checkpoint`` (a folder) the state is saved after every epoch and
    a rerun continues from the last finished epoch with the same result as an
    uninterrupted run.

    Each epoch's negatives are drawn at once (`epoch_negatives`) and moved to the device
    with the epoch's order, so a step does no host work. ``cfg.hard_negatives`` of the K
    come from the raw encoder's top ``cfg.hard_pool`` non-gold candidates of the record.
    With ``cfg.val_fraction`` a seeded slice of the records is held out and ranked against
    the subjects of all the records' gold in the index's space (frozen S, or T(S) where the
    index holds it) before training and after each epoch (avg R@5..20); the best epoch's
    weights are kept (epoch 0: the untrained head)
    and, with ``cfg.patience``, training stops after that many epochs without a better
    score. ``history`` (a dict), when given, receives ``val`` (the scores, epoch 0 first)
    and ``best_epoch``.
    """
    siamese = cfg.siamese
    index_transformed = SUBJECT_SPACES[cfg.subject_space][1]
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    device = resolve_device(cfg.device)
    head.to(device)
    opt, sched = _optimiser(head, cfg)
    loss_fn = MarginLoss(cfg.margin)
    history = {} if history is None else history

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)

    gold = gold_array(gold_rows)
    train_rows = np.arange(len(records))
    val_rows = np.zeros(0, dtype=np.int64)
    if cfg.val_fraction > 0:
        n_val = max(1, round(cfg.val_fraction * len(records)))
        val_rows = np.sort(np.random.default_rng(cfg.seed + 1).choice(
            len(records), n_val, replace=False))
        train_rows = np.setdiff1d(train_rows, val_rows)
    cand, X, P = tensor(candidate_vectors), tensor(records), tensor(positives)
    n, m = len(train_rows), len(cand)
    k_hard = min(cfg.hard_negatives, cfg.negatives)
    pool = (hard_pool(records[train_rows], candidate_vectors, gold[train_rows], cfg.hard_pool)
            if k_hard else None)
    steps = -(-n // cfg.batch_size)
    losses: list[float] = []
    best: dict[str, torch.Tensor] | None = None
    if checkpoint is not None and (Path(checkpoint) / "state.json").exists():
        losses, best = _load_checkpoint(Path(checkpoint), head, opt, sched, rng, cfg,
                                        history)

    def validate() -> None:
        """Score the held-out slice; keep the weights if they are the best so far."""
        nonlocal best
        subjects = (_apply(head, cand[seen_t]) if index_transformed
                    else candidate_vectors[seen])
        score = recall_at(_apply(head, X[torch.from_numpy(val_rows)]), subjects,
                          [gold_rows[int(i)] for i in val_rows], rows=seen)
        history.setdefault("val", []).append(score)
        if score >= max(history["val"]):
            history["best_epoch"] = len(history["val"]) - 1
            best = {k: v.detach().clone() for k, v in head.state_dict().items()}

    # the held-out slice ranks the subjects of all the records' gold (the "seen" set): a
    # proxy of the full ranking at a fraction of its cost (siamese: T(S) every epoch)
    seen = np.unique(gold[gold >= 0])
    seen_t = torch.from_numpy(seen).to(device)
    if len(val_rows) and not history.get("val"):
        validate()
    head.train()
    report = log_progress(log, description, cfg.epochs * steps) if show_progress else None
    step = len(losses) * steps
    for epoch in range(len(losses), cfg.epochs):
        if len(val_rows) and cfg.patience and \
                epoch - history.get("best_epoch", 0) >= cfg.patience:
            break
        local = rng.permutation(n)
        order = train_rows[local]
        neg = epoch_negatives(rng, m, gold[order], cfg.negatives)
        if pool is not None:  # k_hard > 0
            hard = np.take_along_axis(
                pool[local], rng.integers(0, pool.shape[1], size=(n, k_hard)), axis=1)
            neg[:, :k_hard] = np.where(hard >= 0, hard, neg[:, :k_hard])
        order_t = torch.from_numpy(order).to(device)
        neg_t = torch.from_numpy(neg).to(device)
        total = torch.zeros((), device=device)  # summed on device: no sync per step
        for start in range(0, n, cfg.batch_size):
            rows = order_t[start:start + cfg.batch_size]
            anchor, pos = X[rows], P[rows]
            negs = cand[neg_t[start:start + cfg.batch_size]]       # (B, K, d)
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
            total += loss.detach() * len(rows)
            step += 1
            if report is not None:
                report(step)
        sched.step()
        losses.append(float(total) / n)
        if len(val_rows):
            validate()
        if checkpoint is not None:
            _save_checkpoint(Path(checkpoint), head, opt, sched, rng, losses, cfg,
                             history, best)
    if best is not None:
        head.load_state_dict(best)
    head.eval()
    head.to("cpu")
    return losses
