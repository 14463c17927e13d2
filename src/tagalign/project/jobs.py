"""Tagging in several processes that share one loaded project (`tagalign suggest --jobs`,
as Annif's ``--jobs``).

A third of a record's work is Python holding the GIL (the lexical scan, the reasons, the
analyzer), so threads of one process stop adding speed at about 1.5 cores. Processes do
not share a GIL. They are forked from the process that loaded the project, after it
loaded it: each starts with the loaded model in pages it shares with the others (copied
only where a process writes), so N jobs neither load the model N times nor hold N copies.

The thread count in force (``--threads``, else the cores) is shared out among the jobs:
on 2 cores, 2 jobs of one thread each. A job with one thread starts no thread pool, so a
process forked after the parent used its pools (a benchmark that trained first) does not
inherit pools whose threads it lacks (`Runtime.after_fork` drops them).

Each `TaggingJobs.submit` call splits its records into contiguous slices sent to the
jobs and returns the answers in the records' order, equal to `Tagger.tag`'s.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from tagalign.errors import TagalignError
from tagalign.project.tagger import Tagger
from tagalign.records import Checked, Record
from tagalign.suggest import SuggestRequest, Tagged

#: Linux's ``prctl`` option: a signal sent to this process when its parent ends
_PR_SET_PDEATHSIG = 1

#: `tagalign suggest`'s ``--jobs``: one process per core (the benchmarks time this default)
DEFAULT_JOBS = 0

#: records per task sent to a job: a call's records in slices this small, so that the
#: jobs finish a call together (one slice a job left the quicker job idle while the other
#: finished), large enough for the pipeline's batched steps (measured: docs/benchmarks.md)
SLICE = 128

#: the tagger the forked jobs tag with (set before they are forked: a loaded model
#: cannot be sent to a process, it is inherited)
_TAGGER: Tagger | None = None
#: a job's thread that tags (`_start`)
_RUNNER: ThreadPoolExecutor | None = None


class JobsError(TagalignError):
    """A tagging job ended without answering (killed, out of memory)."""


def usable_cores() -> int:
    """The cores this process may run on (its affinity, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def resolve_jobs(jobs: int) -> int:
    """``jobs`` processes, 0 meaning one per usable core; 1 where ``fork`` is missing
    (Windows, where a job would load the model again)."""
    if jobs < 0:
        raise ValueError(f"jobs must be >= 0, got {jobs}")
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return jobs or usable_cores()


def _die_with_parent(parent: int) -> None:
    """Linux ends this process when its parent ends, however it ends: a job of a killed
    `tagalign suggest` would otherwise wait forever for work (it holds the task pipe's
    write end itself, so it never reads an end of file). Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _start(threads: int, parent: int) -> None:
    """A forked job's first step: it ends with its parent, the parent handles Ctrl-C (it
    ends the jobs), and it tags in a thread of its own with its share of the threads.

    Not in its main thread: that is the copy of the parent's forking thread, and GNU
    OpenMP (LightGBM, faiss, torch) keeps that thread's team, whose threads a child
    lacks: a parallel region of two threads there waits for them forever (measured: a
    job's first LightGBM predict after the parent had predicted with 4 threads). A thread
    started after the fork gets a team of its own."""
    global _RUNNER
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    assert _TAGGER is not None
    _TAGGER.project.runtime.after_fork(threads)
    _RUNNER = ThreadPoolExecutor(1, thread_name_prefix="tagalign-job",
                                 initializer=_TAGGER.project.runtime.apply)


def _ready() -> int:
    return os.getpid()


def _tag(records: Sequence[Record | Checked], request: SuggestRequest) -> list[Tagged]:
    assert _TAGGER is not None and _RUNNER is not None
    return _RUNNER.submit(_TAGGER.tag, records, request).result()


class TaggingJobs:
    """``with TaggingJobs(tagger, jobs) as jobs: jobs.submit(records, request)()``:
    `Tagger.tag` in ``jobs`` forked processes (0: one per core; 1: in this process, no
    fork)."""

    def __init__(self, tagger: Tagger, jobs: int = 0):
        self.tagger = tagger
        self.project = tagger.project
        self.jobs = resolve_jobs(jobs)
        self._pool: ProcessPoolExecutor | None = None

    @property
    def forked(self) -> bool:
        """Whether the jobs run in processes of their own (else here)."""
        return self._pool is not None

    def __enter__(self) -> TaggingJobs:
        if self.jobs > 1:
            self.project.trained_recipe()  # an untrained project fails here, not in a job
            self._start_pool()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_pool(self) -> None:
        global _TAGGER
        _TAGGER = self.tagger
        threads = max(1, self.project.runtime.n_threads // self.jobs)
        self._pool = ProcessPoolExecutor(self.jobs, multiprocessing.get_context("fork"),
                                         initializer=_start, initargs=(threads, os.getpid()))
        # objects that exist now are never collected in a job: a collection there would
        # write to them and copy their pages (the shared model) into the job
        gc.collect()
        gc.freeze()
        try:
            # fork every job now, before the caller starts threads of its own (a progress
            # bar's) whose locks a forked job could inherit held
            for f in [self._pool.submit(_ready) for _ in range(self.jobs)]:
                f.result()
        finally:
            gc.unfreeze()

    def submit(self, records: Sequence[Record | Checked], request: SuggestRequest
               ) -> Callable[[], list[Tagged]]:
        """Start `Tagger.tag` of ``records`` in the jobs; the call returned waits for the
        answers (same answers, same order; `tagalign.predictions.tagging.tag_records`
        starts the next batch meanwhile). Without jobs the records are tagged here and
        now."""
        if self._pool is None or len(records) < 2:
            tagged = self.tagger.tag(records, request)
            return lambda: tagged
        n = min(max(self.jobs, -(-len(records) // SLICE)), len(records))
        bounds = [len(records) * i // n for i in range(n + 1)]
        futures: list[Future] = [self._pool.submit(_tag, list(records[lo:hi]), request)
                                 for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]

        def answers() -> list[Tagged]:
            try:
                return [t for f in futures for t in f.result()]
            except BrokenProcessPool as exc:
                raise JobsError(
                    "a tagging process ended without answering (killed, or out of memory?); "
                    "try fewer --jobs or --threads") from exc

        return answers

    def close(self) -> None:
        """End the jobs (idempotent)."""
        global _TAGGER
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            _TAGGER = None
