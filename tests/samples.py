"""Seeded samples of the shared data files for tests (never a file prefix alone: the files
are sorted by language and type, so a sample is drawn at random from the first ``limit``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tagalign.records import Record, read_records


def seeded_sample(path: Path, vocab, n: int, limit: int, seed: int) -> list[Record]:
    """``n`` records with subjects, drawn with ``default_rng(seed)`` from the first ``limit``
    of ``path``, in file order."""
    recs = [r for r in read_records(path, vocab=vocab, limit=limit) if r.subjects]
    idx = np.random.default_rng(seed).choice(len(recs), n, replace=False)
    return [recs[i] for i in sorted(idx)]


def cut_vocabulary(vocab, records, extra=()):
    """``vocab`` cut to the gold headings of ``records`` (and the ids ``extra``), in its
    order: a label index and a lexical matcher over them instead of the whole GND."""
    from tagalign.vocab import Vocabulary

    used = {s for r in records for s in r.subjects} | set(extra)
    return Vocabulary(s for s in vocab.subjects if s.id in used)


def small_hybrid_case(shared_data: Path, gnd_vocab, n_dev: int):
    """(vocabulary cut to the sample's subjects, 600 train records, ``n_dev`` dev records),
    both seeded; the cut keeps the label index small."""
    train = seeded_sample(shared_data / "llms4subjects/train.jsonl.gz", gnd_vocab, 600, 20000, 3)
    dev = seeded_sample(shared_data / "llms4subjects/dev.jsonl.gz", gnd_vocab, n_dev, 4000, 4)
    return cut_vocabulary(gnd_vocab, train + dev), train, dev
