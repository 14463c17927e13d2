"""The settings of the ``domains`` source (`tagalign.classify.source.DomainSource`).

The source is the domain classifier's (its package loads torch); its settings live here,
beside the other sources', so the hybrid's config (`tagalign.suggest.config.HybridConfig`)
composes them without loading that package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tagalign.params import NonNegative, NonNegativeFloat, Positive, PositiveFloat
from tagalign.suggest.sources.base import SourceConfig


@dataclass(frozen=True)
class DomainSourceConfig(SourceConfig):
    """The domains to predict (``labels``; None: those the training records carry), the
    linear classifier's ``C``, records it trains on (``limit_train``; None: all) and
    ``seed`` (the hybrid's); ``smoothing``: the profiles' additive smoothing."""

    labels: Sequence[str] | None = None
    limit_train: Positive | None = None
    C: PositiveFloat = 4.0
    smoothing: NonNegativeFloat = 1.0
    seed: NonNegative = 13
