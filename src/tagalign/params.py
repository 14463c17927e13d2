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

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, ClassVar, Self, Union, get_args, get_origin, get_type_hints

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


def _or_none(ranged: Any) -> Any:
    """``Annotated[T, rules]`` as ``Annotated[T | None, rules]``: None allowed, the range
    kept on the value."""
    base, *rules = get_args(ranged)
    return Annotated[(base | None, *rules)]


def _field_type(declared: Any, default: Any) -> Any:
    """The checked type of a parameter: its declared range, else its default's type; a
    default of None also allows None."""
    if declared is None:
        return _type_of(default)
    if default is None:
        return _or_none(declared)
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


@dataclass(frozen=True)
class PartConfig:
    """The settings of one part of a model (a source, the fusion ranker, the quality
    estimate, the encoder trainer ...), as scikit-learn estimators take theirs: one field
    each, with its default and, where its type is not check enough, its range as an
    `Annotated` type (`Positive` ...), checked when the config is made (`ParamError`).

    A part is built from its config only; the recipe's config composes its parts'
    (`tagalign.suggest.config.HybridConfig`), and only that config knows the flat names a
    recipe's parameters are saved under. A field without a plain default (a part config
    inside another, ``default_factory``) is checked by its own class.

    A model's parameters are saved flat (`to_params`, read back by `from_params`): a config
    without parts as its fields, in field order; one that composes parts lists its
    ``saved_order``, each name setting its own field and every part's field of that name
    (alike: `ParamError` otherwise), e.g. `tagalign.recipes.nbf.NBFConfig`."""

    #: what errors call a config of this kind
    kind: ClassVar[str] = "config"
    #: the flat names of a config with parts, in the order a model saves them
    saved_order: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self._spec().check(self.values())
        for flat, paths in self.flat_names().items():  # saved as one name: one value
            values = [self._at(path) for path in paths]
            if any(v != values[0] for v in values[1:]):
                raise ParamError(f"{self.kind} {type(self).__name__}: {flat} is saved once "
                                 f"for {', '.join(paths)}, which differ "
                                 f"({', '.join(map(repr, values))}): give it through "
                                 "from_params")

    # -- the flat (saved) parameters -----------------------------------------------------
    @classmethod
    def part_names(cls) -> list[str]:
        """The fields holding a part's config."""
        return [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and isinstance(cls.field_default(f.name), PartConfig)]

    @classmethod
    def flat_names(cls) -> dict[str, tuple[str, ...]]:
        """Each flat (saved) name → the fields it sets, ``part.field`` or an own field, in
        saved order: a config without parts, its fields; one with parts, its
        ``saved_order``, each name its own field and every part's field of that name. A
        config whose saved names are not its fields' overrides this
        (`tagalign.suggest.config.HybridConfig`)."""
        return cls._names_of_fields()

    @classmethod
    @functools.cache
    def _names_of_fields(cls) -> dict[str, tuple[str, ...]]:
        if not cls.saved_order:
            return {name: (name,) for name in cls.field_names()}
        parts = cls.part_names()
        out = {}
        for name in cls.saved_order:
            paths = tuple([name] if name in cls.field_names() and name not in parts else []) + \
                tuple(f"{part}.{name}" for part in parts
                      if name in type(cls.field_default(part)).field_names())
            if not paths:
                raise TypeError(f"{cls.__name__}.saved_order names {name!r}, no field")
            out[name] = paths
        return out

    def _at(self, path: str) -> Any:
        part, _, name = path.rpartition(".")
        return getattr(getattr(self, part) if part else self, name)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """The config of a model's flat ``params`` (missing ones take their default; a name
        that is no parameter, one an older version saved, is left out)."""
        own: dict[str, Any] = {}
        parts: dict[str, dict[str, Any]] = {}
        for flat, paths in cls.flat_names().items():
            if flat not in params:
                continue
            for path in paths:
                part, _, name = path.rpartition(".")
                (parts.setdefault(part, {}) if part else own)[name] = params[flat]
        return cls(**own, **{part: dataclasses.replace(cls.field_default(part), **values)
                             for part, values in parts.items()})

    def to_params(self) -> dict[str, Any]:
        """The flat parameters, in their saved order."""
        return {flat: self._at(paths[0]) for flat, paths in self.flat_names().items()}

    @classmethod
    def flat_ranges(cls) -> dict[str, Any]:
        """The ranges of the flat names whose first field declares one."""
        out = {}
        for flat, paths in cls.flat_names().items():
            part, _, name = paths[0].rpartition(".")
            owner = type(cls.field_default(part)) if part else cls
            if name in owner.ranges():
                out[flat] = owner.ranges()[name]
        return out

    def values(self) -> dict[str, Any]:
        """The settings by field name, in field order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def field_default(cls, name: str) -> Any:
        """The default of field ``name`` (a nested config's: a new one)."""
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        if f.default is not dataclasses.MISSING:
            return f.default
        factory = f.default_factory
        if not callable(factory):
            raise TypeError(f"{cls.__name__}.{name} has no default")
        return factory()

    @classmethod
    @functools.cache
    def ranges(cls) -> dict[str, Any]:
        """Field → its range, for the fields that declare one (an `Annotated` type, or a
        union without None such as ``bool | Literal["auto"]``); made once per class: a
        recipe's ranges are these same objects."""
        hints = get_type_hints(cls, include_extras=True)
        out = {}
        for name in cls.field_names():
            hint = hints[name]
            if get_origin(hint) in (Union, UnionType):  # ``Positive | None``: the range,
                args = get_args(hint)                   # and None allowed
                ranged = next((a for a in args if get_origin(a) is Annotated), None)
                if ranged is not None:
                    hint = _or_none(ranged) if type(None) in args else ranged
                elif type(None) not in args:
                    out[name] = hint
            if get_origin(hint) is Annotated:
                out[name] = hint
        return out

    @classmethod
    @functools.cache
    def _spec(cls) -> ParamSpec:
        plain = [f for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING]
        own = cls.ranges()
        return ParamSpec(f"{cls.kind} {cls.__name__}", {f.name: f.default for f in plain},
                         **{f.name: own[f.name] for f in plain if f.name in own})
