"""Seeded samples of the shared data files for tests (never a file prefix alone: the files
are sorted by language and type, so a sample is drawn at random from the first ``limit``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tagalign.records import Record, read_records


def seeded_sample(path: Path, vocab, n: int, limit: int, seed: int) -> list[Record]:
    """``n`` records with subjects, drawn with ``default_rng(seed)`` from the first ``limit``
    of ``path``, in file order."""
    recs = [r for r in read_records(path, vocab=vocab, limit=limit) if r.subjects]
    idx = np.random.default_rng(seed).choice(len(recs), n, replace=False)
    return [recs[i] for i in sorted(idx)]
