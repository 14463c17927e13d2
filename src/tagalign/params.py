"""Parameter checks shared by every recipe (subject tagging, classify, pairs).

A recipe keeps its published ``defaults`` dict; each parameter gets the type of its default
and, when its name is in `RANGES` (names mean the same in every recipe: ``epochs``,
``batch_size``, ``lr`` …), that range; a recipe declares other ranges as keyword arguments
(`Annotated` pydantic types). `ParamSpec.check` refuses a bad value before anything is
loaded, naming the parameter, the value and what is allowed:

    SPEC = ParamSpec("pairs", DEFAULTS, pooling_size=Positive)
    SPEC.check({"epochs": -1})   # ParamError: pairs: parameter epochs=-1: must be >= 1

Unknown names are the recipes' own business (their messages list the known ones).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tagalign.errors import UsageError

#: shorthands for ranges a recipe declares itself
Positive = Annotated[int, Field(ge=1)]
Fraction = Annotated[float, Field(ge=0, le=1)]


_POS, _NONNEG, _GT0 = Field(ge=1), Field(ge=0), Field(gt=0)
#: Ranges by parameter name (a default of None also allows None).
RANGES: dict[str, tuple[type, Any]] = {
    **dict.fromkeys(("epochs", "embed_epochs", "batch_size", "embed_batch_size",
                     "encode_batch_size", "inference_batch_size", "max_seq_length",
                     "limit_train", "limit_pairs", "max_train_records", "max_ranker_records",
                     "domain_limit_train", "negatives", "hidden", "top_k", "knn_k",
                     "candidates_per_source", "omikuji_max_depth", "embed_dim",
                     "embed_vocab_size", "ranker_rounds", "max_iter", "min_df", "step_size",
                     "t_max", "min_language_records", "logging_steps", "max_ngram",
                     "agreement_top_m", "bag"),
                    (int, _POS)),
    **dict.fromkeys(("epochs_head", "epochs_contrastive", "epochs_post", "seed", "threads",
                     "train_layers", "embed_hard_negatives"), (int, _NONNEG)),
    **dict.fromkeys(("lr", "lr_head", "lr_body", "embed_lr", "temperature", "C", "gamma"),
                    (float, _GT0)),
    **dict.fromkeys(("warmup", "margin", "weight_decay", "eta_min", "alpha", "knn_power"),
                    (float, _NONNEG)),
    "dropout": (float, Field(ge=0, lt=1)),
    "holdout_fraction": (float, Field(gt=0, lt=1)),
    "max_df": (float, Field(gt=0, le=1)),
    "omikuji_cluster_k": (int, Field(ge=2)),
}


class ParamError(UsageError):
    """A parameter value of the wrong type or outside its range."""


def _type_of(default: Any) -> Any:
    """The declared type of a parameter without one: its default's (None: anything)."""
    if default is None:
        return Any
    if isinstance(default, bool):
        return bool
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float  # an int given for a float is fine (pydantic widens it)
    return type(default)


def _ranged(name: str, default: Any) -> Any:
    if name not in RANGES:
        return _type_of(default)
    typ, field = RANGES[name]
    return Annotated[typ | None if default is None else typ, field]


def _allowed(error: dict[str, Any]) -> str:
    """pydantic's wording of a failed constraint, as a short rule."""
    ctx = error.get("ctx") or {}
    for key, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if key in ctx:
            return f"must be {sign} {ctx[key]}"
    return str(error["msg"]).lower()


class ParamSpec:
    """Types and ranges of a recipe's parameters (``what`` names it in errors)."""

    def __init__(self, what: str, defaults: dict[str, Any], **declared: Any):
        unknown = set(declared) - set(defaults)
        if unknown:  # a typo here would silently check nothing
            raise TypeError(f"{what}: ranges for parameters without defaults {sorted(unknown)}")
        self.what = what
        fields: dict[str, Any] = {
            name: (declared.get(name) or _ranged(name, default), default)
            for name, default in defaults.items()}
        # strict: "3" from a --config file is not the integer 3 (the recipe would get a str)
        self.model: type[BaseModel] = create_model(
            "Params", __config__=ConfigDict(extra="ignore", strict=True,
                                            arbitrary_types_allowed=True), **fields)

    def check(self, params: dict[str, Any]) -> None:
        """Raise `ParamError` for the first bad value among ``params`` (given ones only)."""
        known = {k: v for k, v in params.items() if k in self.model.model_fields}
        try:
            self.model.model_validate(known)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0])
            raise ParamError(f"{self.what}: parameter {name}={params[name]!r}: "
                             f"{_allowed(err)}") from None
