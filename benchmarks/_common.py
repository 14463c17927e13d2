"""What the benchmark scripts share: where the shared data lives, peak memory."""

from __future__ import annotations

import resource
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
