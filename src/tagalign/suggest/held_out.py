"""Held-out evidence: what a trained subject model says of training records it did not
learn from, kept for the models stacked on top of it.

The hybrid is trained by stacking: its sources learn from split A of train and its ranker
from their candidates on split B (`tagalign.train.stacking`), and its quality estimate
already needs each B record scored by a ranker fitted on the other folds of B. Those
out-of-fold lists, with the neighbour records the sources' searches found for each B
record in A's memory, are suggestions for training records from a model that never saw
them: what a domain model stacked on the subjects (`tagalign.classify.stack`) may learn
from besides the dev records, without trusting suggestions the project made for records it
memorised (issue 34). Kept beside the model (``held-out/``: ``evidence.json`` and one JSON
line per record, gzip); suggesting never reads it.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagalign.errors import ModelFormatError
from tagalign.io import read_json, write_json_atomic
from tagalign.io.atomic import atomic_text
from tagalign.suggest.suggestion import Neighbours

FOLDER, META, LINES = "held-out", "evidence.json", "records.jsonl.gz"


@dataclass
class HeldOutEvidence:
    """Per held-out training record: its id, the subjects suggested for it (id, score) best
    first, ``depth`` deep, and its neighbour records by source; ``about``: how they were
    made (the split, the ranker folds)."""

    ids: list[str]
    suggested: list[list[tuple[str, float]]]
    neighbours: list[Neighbours]
    depth: int
    about: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not len(self.ids) == len(self.suggested) == len(self.neighbours):
            raise ValueError("held-out evidence: ids, suggestions and neighbours differ in "
                             "length")

    def __len__(self) -> int:
        return len(self.ids)

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_text(folder / LINES) as fh:
            for rid, sug, nbrs in zip(self.ids, self.suggested, self.neighbours, strict=True):
                fh.write(json.dumps({"id": rid, "s": [[s, round(float(v), 6)] for s, v in sug],
                                     "n": {k: [[i, round(float(v), 6)] for i, v in row]
                                           for k, row in nbrs.items()}},
                                    ensure_ascii=False) + "\n")
        # the meta last: a folder without it is an unfinished one and is not read
        write_json_atomic(folder / META, {"records": len(self), "depth": self.depth,
                                          **self.about})

    @classmethod
    def load(cls, folder: Path) -> HeldOutEvidence | None:
        """The evidence saved in ``folder``; None when there is none (a model trained
        before it was kept, or with ``held_out_evidence=false``)."""
        folder = Path(folder)
        if not (folder / META).exists():
            return None
        meta = read_json(folder / META)
        ids, suggested, neighbours = [], [], []
        with gzip.open(folder / LINES, "rt", encoding="utf-8") as fh:
            for line in fh:
                obj = json.loads(line)
                ids.append(obj["id"])
                suggested.append([(s, float(v)) for s, v in obj["s"]])
                neighbours.append({k: [(i, float(v)) for i, v in row]
                                   for k, row in obj["n"].items()})
        if len(ids) != meta["records"]:
            raise ModelFormatError(f"{folder}: {len(ids)} held-out records, "
                                   f"{META} says {meta['records']}")
        about = {k: v for k, v in meta.items() if k not in ("records", "depth")}
        return cls(ids, suggested, neighbours, int(meta["depth"]), about)
