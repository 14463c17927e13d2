"""`zero-shot` — the raw encoder: how good is it without any training?"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tagalign.recipes.base import register_recipe
from tagalign.recipes.dense import DenseRecipe
from tagalign.records import Record


@register_recipe
class ZeroShotRecipe(DenseRecipe):
    name = "zero-shot"

    def fit(self, records: Sequence[Record], *, workdir: Path) -> None:
        self.positions_ = self.subject_positions(records)
        self.build_index(self.encode_subjects(self.positions_))
