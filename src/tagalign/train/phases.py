"""Resumable training phases: each finished phase is a folder written atomically.

A rerun of an interrupted `tagalign train` loads finished phases instead of recomputing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

from tagalign.io import atomic_dir, write_json_atomic

T = TypeVar("T")
log = logging.getLogger(__name__)
DONE = "phase.json"


def rss_gb() -> float:
    return psutil.Process().memory_info().rss / 1e9


class PhaseRunner:
    """Runs named phases under ``workdir``; records each one's time and memory."""

    def __init__(self, workdir: Path, quiet: bool = False):
        self.workdir = Path(workdir)
        self.quiet = quiet
        self.timings: dict[str, dict[str, float]] = {}

    def log(self, message: str) -> None:
        if not self.quiet:
            log.info(message)

    def run(self, name: str, build: Callable[[], T], save: Callable[[T, Path], None],
            load: Callable[[Path], T]) -> T:
        folder = self.workdir / name
        if (folder / DONE).exists():
            self.log(f"✓ {name}: finished earlier, resuming from {folder}")
            return load(folder)
        self.log(f"▶ {name} …")
        t0 = time.perf_counter()
        value = build()
        seconds = time.perf_counter() - t0
        with atomic_dir(folder) as tmp:
            save(value, tmp)
            write_json_atomic(tmp / DONE, {"phase": name, "seconds": seconds})
        self.timings[name] = {"seconds": round(seconds, 1), "rss_gb": round(rss_gb(), 2)}
        self.log(f"✓ {name}: {seconds:.1f} s, RSS {rss_gb():.2f} GB")
        return value

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """A cheap, unsaved step (timed and logged only)."""
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
        self.timings[name] = {"seconds": round(seconds, 1), "rss_gb": round(rss_gb(), 2)}
        self.log(f"✓ {name}: {seconds:.1f} s, RSS {rss_gb():.2f} GB")
        return value
