"""Parameters of the pairs recipe: published defaults, their ranges and checks, importable
without torch (so `tagalign pairs train` refuses a bad value before loading anything)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tagalign.errors import InputError
from tagalign.model_files import ModelFamily
from tagalign.pairs.losses import get_loss
from tagalign.params import NonNegative, NonNegativeFloat, PartConfig, Positive, PositiveFloat

RECIPE = "ordinal-wic"
POOLINGS = ("mean", "target")
#: how `tagalign.pairs.thresholds.Thresholds` chooses a language's cut points
CUT_MODES = ("language", "pooled", "shrunk", "normalised")


@dataclass(frozen=True)
class PairsConfig(PartConfig):
    """The pair scorer's parameters, in their saved order (`PairScorerBase.config_class`:
    its ``defaults`` and ``ranges`` are these fields')."""

    base_model: str = "e5-small"
    loss: str = "angle"
    pooling: str = "mean"
    lr: PositiveFloat = 1e-5
    batch_size: Positive = 32
    #: 0: the untuned encoder with fitted cut points (the benchmark's floor row)
    epochs: NonNegative = 10
    max_seq_length: Positive = 128
    train_layers: NonNegative | None = None
    train_markers: bool = True
    limit_pairs: Positive | None = None
    seed: NonNegative = 0
    warmup: NonNegativeFloat = 0.1
    encode_batch_size: Positive = 64
    #: normalised: ahead of per-language cut points for mean pooling (the default) and its
    #: ensembles in the lemma-grouped CV, even with target pooling (docs/pairs.md, issue 35)
    cut_mode: str = "normalised"
    cut_shrink: float = 8.0
    #: untuned encoders beside the tuned one, the tuned one's weight per language ("*":
    #: others): `tagalign.pairs.ensemble`
    ensemble: list[Any] = field(default_factory=list)
    ensemble_weights: dict[str, Any] = field(default_factory=dict)

    kind: ClassVar[str] = "pairs config"

    def __post_init__(self) -> None:
        """The choices (pooling, loss, cut mode, ensemble members) and ``cut_shrink`` too:
        `PairScorerBase.check_params` refuses them before any model loads."""
        super().__post_init__()
        if self.pooling not in POOLINGS:
            raise InputError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        get_loss(self.loss)
        if self.cut_mode not in CUT_MODES:
            raise InputError(f"cut_mode must be one of {CUT_MODES}, got {self.cut_mode!r}")
        if self.ensemble or self.ensemble_weights:
            from tagalign.pairs.ensemble import check_members

            check_members(self.ensemble, self.ensemble_weights)
        shrink = self.cut_shrink
        if not isinstance(shrink, (int, float)) or shrink < 0:
            raise InputError(f"cut_shrink must be a number >= 0, got {shrink!r}")


class PairScorerBase(ModelFamily):
    """The pair scorer's parameters, their check and its manifest, importable without torch
    (`tagalign.pairs.model.PairScorer` is the model)."""

    name = RECIPE
    config_class = PairsConfig
    config: PairsConfig
    kind = "pairs model"
    retrain = "the pairs model (tagalign pairs train)"
    # saved without the key before the families shared one manifest: format 1
    model_format, read_formats, unversioned_format = 1, (1,), 1

    @classmethod
    def params_label(cls) -> str:
        return "pairs"

    @classmethod
    def unknown_params_message(cls, unknown: list[str]) -> str:
        return (f"unknown parameter(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(cls.defaults))}")


check_params = PairScorerBase.check_params
#: the published defaults (`PairsConfig`'s)
DEFAULTS = PairScorerBase.defaults
