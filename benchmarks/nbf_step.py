#!/usr/bin/env python
"""Issue 21: where an R2 (`nbf-attention`) training step spends its time, and ms per step.

Protocol: synthetic frozen embeddings (d = 512, ``--records`` records, ``--candidates``
subjects, 3 gold subjects per record, numpy default_rng(0)); the published head
(`DimensionAttentionHead`), margin loss with K = 15 negatives, AdamW, ``fixed`` subject
space. Each part of a step is timed on its own with ``time.perf_counter`` (the CPU runs
torch ops synchronously, so a part's wall time is its cost), ``--steps`` steps after 10
warm-up steps, and the mean ms per part is printed:

* ``sample negatives``: the per-step host work of the old loop (`sample_negatives` over the
  batch's gold sets) vs. the batched per-epoch draw (`epoch_negatives`) divided per step;
* ``gather``: numpy → tensor of the batch's rows, indexing anchors/positives/negatives;
* ``attention``: Linear(1→16) + the encoder layer + Linear(16→1) over the 512 tokens;
* ``MLP``, ``loss``, ``backward``, ``optimizer``.

Then the whole step, old loop vs. `train_head` as it is now, for each ``--batches``.

    flock /tmp/cpu.lock python benchmarks/nbf_step.py --threads 2
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from tagalign.encode.heads import DimensionAttentionHead
from tagalign.runtime import set_threads
from tagalign.train.head_training import (
    HeadTrainingConfig,
    epoch_negatives,
    gold_array,
    sample_negatives,
    train_head,
)
from tagalign.train.losses import MarginLoss


def data(n: int, m: int, d: int = 512, seed: int = 0):
    rng = np.random.default_rng(seed)
    cand = rng.standard_normal((m, d)).astype(np.float32)
    gold = [set(rng.choice(m, 3, replace=False).tolist()) for _ in range(n)]
    x = rng.standard_normal((n, d)).astype(np.float32)
    pos = np.stack([cand[sorted(g)].mean(0) for g in gold]).astype(np.float32)
    return x, pos, cand, gold


def parts(batch: int, steps: int, x, pos, cand, gold, k: int = 15, old: bool = True
          ) -> dict[str, float]:
    """Mean ms per part of one step (the old loop's order of work). ``old``: attention by
    `nn.TransformerEncoderLayer` with its dropout on the attention weights; else the
    head's SDPA forward without attention dropout (R2's default now)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    head = DimensionAttentionHead(x.shape[1], attention_dropout=None if old else 0.0)
    layer = head.layer if old else head.encoder_layer
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, weight_decay=0.0)
    loss_fn = MarginLoss(0.2)
    X, P, C = (torch.from_numpy(a) for a in (x, pos, cand))
    t = dict.fromkeys(["sample negatives (per step, old)", "gather", "attention", "MLP",
                       "loss", "backward", "optimizer"], 0.0)
    n = len(x)
    for step in range(steps + 10):
        if step == 10:
            t = dict.fromkeys(t, 0.0)
        idx = rng.integers(0, n, batch)
        t0 = time.perf_counter()
        neg = sample_negatives(rng, len(cand), [gold[i] for i in idx], k)
        t1 = time.perf_counter()
        rows = torch.from_numpy(idx)
        a, p, ng = X[rows], P[rows], C[torch.from_numpy(neg)]
        t2 = time.perf_counter()
        tokens = head.unembed(layer(head.embed(a.unsqueeze(-1)))).squeeze(-1)
        t3 = time.perf_counter()
        out = head.mlp(tokens)
        t4 = time.perf_counter()
        loss = loss_fn(out, p, ng)
        t5 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t6 = time.perf_counter()
        opt.step()
        t7 = time.perf_counter()
        for key, (s, e) in zip(t, [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5),
                                   (t5, t6), (t6, t7)], strict=True):
            t[key] += (e - s) * 1000 / steps
    # the batched draw: one call per epoch, cost spread over its steps
    g = gold_array([gold[i] for i in range(n)])
    t0 = time.perf_counter()
    epoch_negatives(rng, len(cand), g, k)
    t["sample negatives (batched per epoch, new)"] = \
        (time.perf_counter() - t0) * 1000 / (n / batch)
    return t


class _OldHead(DimensionAttentionHead):
    """The head as it was: the encoder layer as `nn.TransformerEncoderLayer` runs it."""

    def encoder_layer(self, t: torch.Tensor) -> torch.Tensor:
        return self.layer(t)


def old_loop_ms(batch: int, steps: int, x, pos, cand, gold, k: int = 15) -> float:
    """ms per step of the loop before issue 21 (per-step sampling and host → tensor, the
    module's attention with dropout on its weights)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    head = _OldHead(x.shape[1])
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, weight_decay=0.0)
    loss_fn = MarginLoss(0.2)
    X, P, C = (torch.from_numpy(a) for a in (x, pos, cand))
    order = rng.permutation(len(x))
    total = torch.zeros(())
    t0 = 0.0
    for i, start in enumerate(range(0, (steps + 10) * batch, batch)):
        if i == 10:
            t0 = time.perf_counter()
        idx = order[start % len(x):start % len(x) + batch]
        neg = sample_negatives(rng, len(cand), [gold[j] for j in idx], k)
        rows = torch.from_numpy(idx)
        loss = loss_fn(head(X[rows]), P[rows], C[torch.from_numpy(neg)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach() * len(idx)
    return (time.perf_counter() - t0) * 1000 / steps


def new_loop_ms(batch: int, steps: int, x, pos, cand, gold, attention_dropout: float
                ) -> float:
    """ms per step of `train_head` now (one epoch of ``steps`` steps, progress off)."""
    n = steps * batch
    head = DimensionAttentionHead(x.shape[1], attention_dropout=attention_dropout)
    cfg = HeadTrainingConfig(epochs=1, batch_size=batch)
    train_head(head, x[:20 * batch], pos[:20 * batch], cand, gold[:20 * batch], cfg,
               show_progress=False)  # warm-up
    t0 = time.perf_counter()
    train_head(head, x[:n], pos[:n], cand, gold[:n], cfg, show_progress=False)
    return (time.perf_counter() - t0) * 1000 / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--candidates", type=int, default=204_569)
    ap.add_argument("--batches", default="4,64")
    args = ap.parse_args()
    set_threads(args.threads)
    x, pos, cand, gold = data(args.records, args.candidates)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load {os.getloadavg()[0]:.2f}; d=512, K=15, {args.records:,} records, "
          f"{args.candidates:,} candidates, {args.steps} timed steps")
    print("\nms per part of one step, batch 4: old (module attention, attention dropout "
          "0.03) | new (SDPA, attention dropout 0):")
    old, new = (parts(4, args.steps, x, pos, cand, gold, old=o) for o in (True, False))
    for key in old:
        print(f"  {key:<44}{old[key]:8.2f}{new[key]:8.2f}")
    print(f"\n{'batch':>6}{'old ms/step':>13}{'new, attn drop 0.03':>21}"
          f"{'new, attn drop 0':>18}{'ms/record':>11}")
    for b in (int(v) for v in args.batches.split(",")):
        steps = max(20, args.steps * 4 // b)
        before = old_loop_ms(b, steps, x, pos, cand, gold)
        paper = new_loop_ms(b, steps, x, pos, cand, gold, 0.03)
        fast = new_loop_ms(b, steps, x, pos, cand, gold, 0.0)
        print(f"{b:>6}{before:13.2f}{paper:21.2f}{fast:18.2f}{fast / b:11.3f}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
