"""Process-wide runtime settings (threads): on 2 cores an extra thread halves speed."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

_THREADS = 0  # 0: not pinned
#: set in threads that each run one part of a batch (`single_threaded_part`)
_LOCAL = threading.local()


def set_threads(n: int) -> None:
    """Pin numpy/BLAS, torch, faiss and the NumPy-only encoders to ``n`` threads.

    0 leaves the defaults. BLAS reads its environment variables when it starts, so call this
    before the first heavy NumPy work; torch and faiss follow at once.
    """
    global _THREADS
    if n <= 0:
        return
    _THREADS = n
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    import faiss

    faiss.omp_set_num_threads(n)


def threads(default: int = 1) -> int:
    """The count `set_threads` pinned, else ``OMP_NUM_THREADS``, else ``default``."""
    if _THREADS:
        return _THREADS
    env = os.environ.get("OMP_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else default


def single_threaded_part() -> None:
    """Mark the calling thread as one of several that split a batch between them: the
    libraries it calls should then use one thread each (`in_part`), so that two parts on two
    cores do not start four OpenMP teams. faiss's (OpenMP) setting is per calling thread."""
    _LOCAL.part = True
    import faiss

    faiss.omp_set_num_threads(1)


def in_part() -> bool:
    """Whether the calling thread runs one part of a split batch (`single_threaded_part`)."""
    return getattr(_LOCAL, "part", False)


def quiet_libraries() -> None:
    """Library progress bars and load reports off (transformers' "Loading weights" bar and
    shard-writing bars, datasets' map bars, tqdm generally, sentence-transformers' info
    logs): a tagalign command shows its own progress, one display at a time."""
    import logging

    import datasets
    import transformers

    os.environ.setdefault("TQDM_DISABLE", "1")  # read by tqdm when a bar is created
    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)


#: ``progress(phase, done, total)``: the one progress-callback type of the package
#: (classifiers, pair scorers); the CLI shows it with `tagalign.cli.common.PhaseBars`.
ProgressCallback = Callable[[str, int, int], None]


def release_free_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). After a one-time build whose temporaries were freed: glibc keeps freed
    arrays under 32 MB in its heap, where they count in the process's RSS (issue 18: the
    TF-IDF search index's build left 28 MiB of a served model's RSS this way)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    with contextlib.suppress(OSError, AttributeError, TypeError):  # not glibc: nothing
        ctypes.CDLL(name).malloc_trim(0)

