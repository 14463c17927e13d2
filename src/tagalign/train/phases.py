"""Resumable training phases: each finished phase is a folder written atomically.

A rerun of an interrupted `tagalign train` loads finished phases instead of recomputing,
but only those fitted on the same inputs: each phase's ``phase.json`` holds the training's
inputs fingerprint (`inputs_fingerprint`: the records, the vocabulary, the recipe and its
parameters). A phase finished on other inputs is recomputed, and so is every later one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import psutil

from tagalign.io import atomic_dir, read_json, write_json_atomic
from tagalign.records import Record
from tagalign.runtime import release_free_memory

T = TypeVar("T")
log = logging.getLogger(__name__)
DONE = "phase.json"


def rss_gb() -> float:
    return psutil.Process().memory_info().rss / 1e9


def peak_rss_gb() -> float:
    """The process's peak RSS so far (Linux ``VmHWM``; elsewhere the RSS now). A phase
    whose peak is above the one before it set the training's high-water mark: which
    phase that is shows where a training's memory goes (issue 48)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return rss_gb()


def inputs_fingerprint(records: Sequence[Record], vocab_fingerprint: str, recipe: str,
                       params: Mapping[str, object]) -> str:
    """SHA-256 of what a training's phases are fitted on: each record's id, texts,
    language, type and subjects (in order), the vocabulary's fingerprint, the recipe's
    name and its parameters. Threads are no input: they change no result worth refitting."""
    h = hashlib.sha256()
    head = {"vocabulary": vocab_fingerprint, "recipe": recipe, "params": dict(params)}
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    for r in records:
        h.update(json.dumps([r.id, r.title, r.abstract, r.language, r.type,
                             list(r.subjects)], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


class PhaseRunner:
    """Runs named phases under ``workdir``; records each one's time and memory.

    ``inputs``: the training's `inputs_fingerprint`, stored in each finished phase; a
    finished phase is reused only when its stored fingerprint equals it. Once one phase
    is recomputed for changed inputs, every later phase of this run is too (it may have
    been fitted on the earlier phase's old result)."""

    def __init__(self, workdir: Path, quiet: bool = False, inputs: str = ""):
        self.workdir = Path(workdir)
        self.quiet = quiet
        self.inputs = inputs
        self.timings: dict[str, dict[str, float]] = {}
        self._stale = False

    def _done(self, name: str, seconds: float) -> None:
        """Record and log a finished phase: seconds, RSS after it, peak RSS so far. The
        heap's free pages go back to the system first (`release_free_memory`): a phase's
        freed temporaries otherwise stay in the RSS the next phases start from (the 1M
        training's embedding phase left 4.4 GB of them; issue 48)."""
        release_free_memory()
        now, peak = rss_gb(), peak_rss_gb()
        self.timings[name] = {"seconds": round(seconds, 1), "rss_gb": round(now, 2),
                              "peak_gb": round(peak, 2)}
        self.log(f"✓ {name}: {seconds:.1f} s, RSS {now:.2f} GB (peak so far {peak:.2f} GB)")

    def log(self, message: str) -> None:
        if not self.quiet:
            log.info(message)

    def finished(self, name: str) -> bool:
        """Whether `run` of phase ``name`` would load it (finished on these inputs, no
        earlier phase recomputed for changed ones) rather than build it."""
        done = self.workdir / name / DONE
        return (not self._stale and done.exists()
                and read_json(done).get("inputs") == self.inputs)

    def run(self, name: str, build: Callable[[], T], save: Callable[[T, Path], None],
            load: Callable[[Path], T]) -> T:
        folder = self.workdir / name
        if self.finished(name):
            self.log(f"✓ {name}: finished earlier, resuming from {folder}")
            return load(folder)
        if (folder / DONE).exists():
            self._stale = True
            log.warning("%s: inputs changed since it finished, recomputing", name)
        self.log(f"▶ {name} …")
        t0 = time.perf_counter()
        value = build()
        seconds = time.perf_counter() - t0
        with atomic_dir(folder) as tmp:
            save(value, tmp)
            write_json_atomic(tmp / DONE, {"phase": name, "seconds": seconds,
                                           "inputs": self.inputs})
        self._done(name, seconds)
        return value

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """A cheap, unsaved step (timed and logged only)."""
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
        self._done(name, seconds)
        return value
