"""Seeded samples that cap what a training step reads (one helper for every cap).

A cap keeps at most ``limit`` of ``n`` items, drawn with numpy's ``default_rng(seed)``
and kept in their order: the same inputs and seed give the same sample on every machine,
and a cap at or above ``n`` keeps everything. Used by the encoder's record cap
(``embed_max_records``), Omikuji's (``omikuji_max_records``) and the pair scorer's
``limit_pairs``: data files are often sorted (by language, type or lemma), so a prefix
would not be a sample.
"""

from __future__ import annotations

import numpy as np


def sample_indices(n: int, limit: int | None, seed: int) -> np.ndarray:
    """Sorted indices of a seeded sample of ``limit`` of ``range(n)``; all ``n`` when
    ``limit`` is None or not below ``n``."""
    if limit is None or limit >= n:
        return np.arange(n)
    if limit < 0:
        raise ValueError(f"a sample cap must be >= 0, got {limit}")
    return np.sort(np.random.default_rng(seed).choice(n, int(limit), replace=False))
