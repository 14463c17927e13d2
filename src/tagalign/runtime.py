"""Process-wide runtime settings (threads): on 2 cores an extra thread halves speed."""

from __future__ import annotations

import os


def set_threads(n: int) -> None:
    """Pin numpy/BLAS, torch and faiss to ``n`` threads (0 leaves the defaults)."""
    if n <= 0:
        return
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    import faiss

    faiss.omp_set_num_threads(n)
