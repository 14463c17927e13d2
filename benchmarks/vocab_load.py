#!/usr/bin/env python
"""Vocabulary load times: the GND TSV, the saved fast form, the bundled invenio YAML."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from _common import DATA
from tagalign.vocab import Vocabulary, load_vocabulary
from tagalign.vocab.loaders import load_invenio_gnd


def timed(label, fn):
    t0 = time.perf_counter()
    value = fn()
    print(f"{label:<40}{time.perf_counter() - t0:7.2f} s")
    return value


def main() -> None:
    vocab = timed("load gnd-subjects.tsv.gz", lambda: load_vocabulary(
        DATA / "gnd" / "gnd-subjects.tsv.gz"))
    print(f"  {len(vocab)} subjects, {sum('en' in s.labels for s in vocab)} with English labels")
    with tempfile.TemporaryDirectory() as tmp:
        timed("save fast form", lambda: vocab.save(Path(tmp)))
        back = timed("load saved fast form (target < 3 s)", lambda: Vocabulary.load(Path(tmp)))
        assert back.fingerprint == vocab.fingerprint
    inv = timed("load invenio-subjects-gnd YAML", load_invenio_gnd)
    print(f"  {len(inv)} subjects")


if __name__ == "__main__":
    main()
