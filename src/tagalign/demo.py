"""`tagalign demo`: the main job on an embedded default, end to end in a few minutes.

GND vocabulary from the `invenio-subjects-gnd` package (no network), training records from
``$TAGALIGN_DATA`` (default ``../shared/data/llms4subjects``), the default recipe trained on
a 5,000-record sample, ranked subjects for one German and one English example. Without
records it falls back to zero-shot label matching and says so.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

from tagalign.records import Record, read_records
from tagalign.vocab import Vocabulary
from tagalign.vocab.loaders import load_invenio_gnd

log = logging.getLogger(__name__)
EXAMPLES = [
    Record(id="demo-de", language="de", title="Schäden durch Pilze an Fachwerkgebäuden",
           abstract="Holzzerstörende Pilze bedrohen Fachwerkhäuser. Der Beitrag beschreibt "
           "Bauschäden durch Hausschwamm und Maßnahmen des Holzschutzes in der "
           "Denkmalpflege."),
    Record(id="demo-en", language="en",
           title="Deep learning for protein structure prediction",
           abstract="We review neural network methods that predict the three-dimensional "
           "structure of proteins from their amino acid sequence, and discuss their impact "
           "on drug design and molecular biology."),
]


def data_dir() -> Path:
    """``$TAGALIGN_DATA``, else ``../shared/data/llms4subjects``: read once, as `tagalign
    demo` starts (its only caller)."""
    return Path(os.environ.get("TAGALIGN_DATA", "../shared/data/llms4subjects"))


def sample_records(path: Path, vocab: Vocabulary, n: int, seed: int = 13) -> list[Record]:
    """A seeded uniform sample of ``n`` records with gold subjects (reservoir sampling)."""
    rng = np.random.default_rng(seed)
    sample: list[Record] = []
    seen = 0
    for rec in read_records(path, vocab=vocab):
        if not rec.subjects:
            continue
        seen += 1
        if len(sample) < n:
            sample.append(rec)
        else:
            j = int(rng.integers(seen))
            if j < n:
                sample[j] = rec
    return sample


def load_demo_vocabulary() -> Vocabulary:
    t0 = time.perf_counter()
    vocab = load_invenio_gnd()
    log.info(f"GND vocabulary from invenio-subjects-gnd: {len(vocab)} subjects "
                f"({time.perf_counter() - t0:.1f} s)")
    return vocab
