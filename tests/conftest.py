"""Shared fixtures: the read-only data in ../shared/data (skipped when absent); the skip
report of `skip_report` (with CI=true a skipped test fails the run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skip_report import (  # noqa: F401 - hooks: skip counts at the end, CI=true fails on skips
    pytest_collectreport,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.exists():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def gnd_vocab(shared_data):
    from tagalign.vocab import load_vocabulary

    return load_vocabulary(shared_data / "gnd" / "gnd-subjects.tsv.gz")


@pytest.fixture(scope="session")
def tiny_hybrids(tmp_path_factory) -> tuple[Path, Path]:
    """Two tiny trained hybrid projects of one vocabulary that suggest differently (trained
    on the tiny records of seeds 0 and 1, the second also on records about zeppelins;
    seconds each): the serve tests' old and new model (`tests/serving.py`,
    `train_tiny_hybrid`)."""
    from serving import train_tiny_hybrid

    root = tmp_path_factory.mktemp("hybrids")
    return (train_tiny_hybrid(root / "a", seed=0),
            train_tiny_hybrid(root / "b", seed=1, zeppelins=True))
