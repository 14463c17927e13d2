"""Parameter checks shared by the three model families (subject recipes, classifiers, pair
scorers; `tagalign.model_files.ModelFamily`).

Each model class keeps its published ``defaults`` dict and, beside it, its ``ranges``: the
`Annotated` pydantic types of the parameters whose default's type is not check enough. Every
other parameter gets the type of its default; a default of None also allows None.
`ParamSpec.check` refuses a bad value before anything is loaded, naming the parameter, the
value and what is allowed:

    SPEC = ParamSpec("pairs", DEFAULTS, epochs=NonNegative, lr=PositiveFloat)
    SPEC.check({"epochs": -1})   # ParamError: pairs: parameter epochs=-1: must be >= 0

Unknown names are the model family's business (its messages list the known ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tagalign.errors import UsageError

#: shorthands for the ranges a model class declares beside its defaults
Positive = Annotated[int, Field(ge=1)]
NonNegative = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
#: strictly between 0 and 1 (a share held out, never none or all)
OpenFraction = Annotated[float, Field(gt=0, lt=1)]


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


def _field_type(declared: Any, default: Any) -> Any:
    """The checked type of a parameter: its declared range, else its default's type; a
    default of None also allows None."""
    if declared is None:
        return _type_of(default)
    if default is None:  # the range stays on the value: Annotated[int | None, Field(ge=1)]
        base, *rules = get_args(declared)
        return Annotated[(base | None, *rules)]
    return declared


def _allowed(error: Mapping[str, Any]) -> str:
    """pydantic's wording of a failed constraint, as a short rule."""
    ctx = error.get("ctx") or {}
    for key, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if key in ctx:
            return f"must be {sign} {ctx[key]}"
    return str(error["msg"]).lower()


class ParamSpec:
    """Types and ranges of a model's parameters (``what`` names it in errors); ``declared``:
    the ranges of some of them (names → `Annotated` types)."""

    def __init__(self, what: str, defaults: dict[str, Any], **declared: Any):
        unknown = set(declared) - set(defaults)
        if unknown:  # a typo here would silently check nothing
            raise TypeError(f"{what}: ranges for parameters without defaults {sorted(unknown)}")
        self.what = what
        fields: dict[str, Any] = {
            name: (_field_type(declared.get(name), default), default)
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
