"""Parameters of the pairs recipe: published defaults and their checks, importable without
torch (so `tagalign pairs train` refuses a bad value before loading anything)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from tagalign.errors import InputError
from tagalign.pairs.losses import get_loss
from tagalign.params import ParamSpec

DEFAULTS: dict[str, Any] = {"base_model": "e5-small", "loss": "angle", "pooling": "mean",
                            "lr": 1e-5, "batch_size": 32, "epochs": 10, "max_seq_length": 128,
                            "train_layers": None, "train_markers": True,
                            "limit_pairs": None, "seed": 0,
                            "warmup": 0.1, "encode_batch_size": 64,
                            # normalised: ahead of per-language cut points for mean
                            # pooling (the default) and its ensembles in the lemma-grouped
                            # CV, even with target pooling (docs/pairs.md, issue 35)
                            "cut_mode": "normalised", "cut_shrink": 8.0}
POOLINGS = ("mean", "target")
#: how `tagalign.pairs.thresholds.Thresholds` chooses a language's cut points
CUT_MODES = ("language", "pooled", "shrunk", "normalised")


def check_params(params: dict[str, Any]) -> None:
    """Names, values and choices (pooling, loss) of ``params``, before any model loads:
    ValueError, or `ParamError` naming the parameter, its value and the allowed range."""
    unknown = sorted(set(params) - set(DEFAULTS))
    if unknown:
        raise InputError(f"unknown parameter(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(DEFAULTS))}")
    # epochs=0: the untuned encoder with fitted cut points (the benchmark's floor row)
    ParamSpec("pairs", DEFAULTS, epochs=Annotated[int, Field(ge=0)]).check(params)
    pooling = params.get("pooling", DEFAULTS["pooling"])
    if pooling not in POOLINGS:
        raise InputError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    get_loss(params.get("loss", DEFAULTS["loss"]))
    mode = params.get("cut_mode", DEFAULTS["cut_mode"])
    if mode not in CUT_MODES:
        raise InputError(f"cut_mode must be one of {CUT_MODES}, got {mode!r}")
    shrink = params.get("cut_shrink", DEFAULTS["cut_shrink"])
    if not isinstance(shrink, (int, float)) or shrink < 0:
        raise InputError(f"cut_shrink must be a number >= 0, got {shrink!r}")
