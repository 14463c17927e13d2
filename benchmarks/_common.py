"""What the benchmark scripts share: where the shared data lives, peak memory."""

from __future__ import annotations

import argparse
import resource
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def add_data_args(ap: argparse.ArgumentParser) -> None:
    """--train/--dev/--vocab, defaulting to the shared LLMs4Subjects data and GND TSV."""
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
