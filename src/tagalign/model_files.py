"""What the three model families share: subject-tagging recipes (`tagalign.recipes`),
classifiers (`tagalign.classify`) and pair scorers (`tagalign.pairs`).

A model class derives from `ModelFamily` and declares, side by side, its ``name``, its
published ``defaults`` and the ``ranges`` of the parameters that need more than their
default's type (`tagalign.params`); `ModelFamily.check_params` refuses unknown names and bad
values before anything is loaded. As scikit-learn's estimators, every model has
`ModelFamily.get_params`, `ModelFamily.set_params` and `ModelFamily.clone` (and the module's
`clone`): an untrained twin with the same parameters::

    recipe = get_recipe("lexical")(vocab, max_ngram=3)
    twin = clone(recipe)            # untrained; twin.get_params() == recipe.get_params()
    twin.set_params(max_ngram=0)    # ParamError: recipe 'lexical': parameter max_ngram=0: ...

A saved model is a folder: the model's own files and one JSON manifest, written atomically,
the same keys for every family (then what the family adds)::

    {"format": 2, "recipe": "hybrid", "params": {...}, ..., "versions": {"tagalign": ...}}

`ModelFamily.read_manifest` reads it back and refuses a format this version cannot read,
with one message for every family, as scikit-learn's ``InconsistentVersionWarning``:
retrain, or use the tagalign that saved it. A manifest without ``format`` (saved before the
key existed) reads as the family's `ModelFamily.unversioned_format`.

Each family saves with ``save(folder)`` (the model's own files, then the manifest, the
folder replaced atomically) and loads with the classmethod ``load(folder, ...)`` (the
manifest read and checked, the model built from its parameters, then its files read:
``_save_state``/``_load_state`` of a recipe or a classifier).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

from tagalign.errors import InputError, MissingFileError, ModelFormatError
from tagalign.io import read_json, versions, write_json_atomic, wrong_model_message
from tagalign.params import ParamSpec, PartConfig

M = TypeVar("M", bound="ModelFamily")


def clone(model: M) -> M:
    """An untrained twin of ``model`` with the same parameters (scikit-learn's
    ``sklearn.base.clone``): `ModelFamily.clone`."""
    return model.clone()


def now() -> str:
    """The time of a save, as manifests record it (UTC, seconds)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class ModelFamily:
    """Parameters, their check and the manifest of a model class (see the module)."""

    #: the model's name in its family's registry (the manifest's ``recipe``)
    name: ClassVar[str]
    #: Published defaults; every key may be overridden (``--param``, the project config).
    defaults: ClassVar[dict[str, Any]] = {}
    #: Ranges of parameters (names → `Annotated` types, e.g. `tagalign.params.Positive`);
    #: the others are checked against their default's type.
    ranges: ClassVar[dict[str, Any]] = {}
    #: Parameters no longer read, still accepted (a saved model's manifest, an old
    #: ``--param``) and dropped.
    retired: ClassVar[frozenset[str]] = frozenset()
    #: Parameters added since models were first saved, with the value a saved model whose
    #: manifest lacks one was trained and served with (where it is not the default now).
    introduced: ClassVar[dict[str, Any]] = {}
    #: this model's parameters, every one (the defaults under the given ones)
    params: dict[str, Any]
    #: the parameters as one typed config (a `tagalign.params.PartConfig`: its
    #: `PartConfig.flat_names` are the parameters in their saved order): when a class sets
    #: it, its ``defaults`` and ``ranges`` are derived from it (`PartConfig.to_params`,
    #: `PartConfig.flat_ranges`) and ``self.config`` is built from ``self.params``
    #: (`PartConfig.from_params`, in `_params_set`); every family's, the hybrid's
    #: (`tagalign.suggest.config.HybridConfig`, whose names are a table) among them
    config_class: ClassVar[type[PartConfig] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("config_class")
        if own is not None:  # defaults written once, on the config's fields
            cls.defaults = own().to_params()
            cls.ranges = own.flat_ranges()

    #: what the family's messages call a saved model, and how to make a new one
    kind: ClassVar[str] = "model"
    retrain: ClassVar[str] = "retrain it"
    #: the manifest's file name in the model's folder
    manifest_name: ClassVar[str] = "config.json"
    #: the format `write_manifest` writes; `read_formats` load, others are refused
    model_format: ClassVar[int] = 1
    read_formats: ClassVar[tuple[int, ...]] = (1,)
    #: the format of a manifest without the ``format`` key (None: refused)
    unversioned_format: ClassVar[int | None] = None

    # -- parameters -------------------------------------------------------------------
    @classmethod
    def params_label(cls) -> str:
        """How parameter errors name the model."""
        return f"recipe {cls.name!r}"

    @classmethod
    def unknown_params_message(cls, unknown: list[str]) -> str:
        return (f"{cls.params_label()} has no parameter(s) {unknown}; "
                f"known: {sorted(cls.defaults)}")

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        """Refuse unknown names (`InputError`) and bad values (`ParamError`: name, value,
        allowed range), before any data or model is loaded; a model with a typed config
        then makes it (the checks a config adds in its ``__post_init__``: a choice of
        values, a pair of bounds ...)."""
        unknown = sorted(set(params) - set(cls.defaults) - cls.retired)
        if unknown:
            raise InputError(cls.unknown_params_message(unknown))
        ParamSpec(cls.params_label(), cls.defaults, **cls.ranges).check(params)
        if cls.config_class is not None:
            cls._make_config(params)

    @classmethod
    def _make_config(cls, params: dict[str, Any]) -> PartConfig:
        """The typed config of ``params`` (`PartConfig.from_params`: the defaults under them;
        a key an older version saved, not a parameter, left out)."""
        if cls.config_class is None:
            raise TypeError(f"{cls.__name__} has no typed config")
        return cls.config_class.from_params(params)

    @classmethod
    def with_defaults(cls, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` over the defaults, retired names dropped."""
        return {**cls.defaults, **{k: v for k, v in params.items() if k not in cls.retired}}

    def get_params(self) -> dict[str, Any]:
        """Every parameter of this model (a copy), as `clone` gives them to its twin."""
        return dict(self.params)

    def set_params(self, **params: Any) -> Self:
        """Change some parameters, refused as when the model is made (unknown names:
        `InputError`; bad values: `ParamError`); returns the model. What a trained model
        learned stays as it is: parameters that need no retraining reach it when it is
        saved and loaded again (`tagalign.project.Project.set_params`)."""
        self.check_params(params)
        self.params = self.with_defaults({**self.params, **params})
        self._params_set()
        return self

    def clone(self) -> Self:
        """An untrained model of the same class with the same parameters."""
        return self._twin(self.get_params())

    def _twin(self, params: dict[str, Any]) -> Self:
        """A new, untrained model of this class with ``params`` (each family's)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be cloned")

    def _params_set(self) -> None:
        """Called once ``self.params`` holds a new set of parameters (made, or changed
        by `set_params`): a model with a typed config builds it here."""
        if self.config_class is not None:
            self.config = self._make_config(self.params)

    @classmethod
    def differing_params(cls, saved: dict[str, Any], asked: dict[str, Any],
                         ignore: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        """The ``saved`` values of the parameters where ``asked`` differs from them, both
        taken over the defaults (a trained model's manifest holds every parameter, a request
        the given ones), ``ignore`` left out: empty when ``asked`` makes the same model."""
        old, new = cls.with_defaults(saved), cls.with_defaults(asked)
        return {k: old.get(k) for k in sorted(set(old) | set(new))
                if k not in ignore and old.get(k) != new.get(k)}

    # -- the manifest -----------------------------------------------------------------
    @classmethod
    def write_manifest(cls, folder: Path, params: dict[str, Any], **fields: Any) -> None:
        """The manifest of a model of this class with ``params`` into ``folder``
        (atomically); ``fields``: what the family keeps beside them."""
        write_json_atomic(folder / cls.manifest_name, {
            "format": cls.model_format, "recipe": cls.name, "params": params, **fields,
            "versions": versions()})

    @classmethod
    def update_params(cls, folder: Path, updates: dict[str, Any]) -> None:
        """Parameters changed after training (they need no retraining: `tagalign hyperopt
        --save`) into the saved model's manifest, atomically: the manifest holds the one
        copy of a saved model's parameters."""
        meta = cls.read_manifest(folder)
        meta["params"] = {**meta["params"], **updates}
        write_json_atomic(folder / cls.manifest_name, meta)

    @classmethod
    def check_folder(cls, folder: Path, kind: str, missing: str) -> None:
        """Refuse a folder that holds another kind of model (`InputError` naming what it
        holds: `tagalign.io.wrong_model_message`) or no manifest (`MissingFileError` with
        ``missing``), before anything is read."""
        wrong = wrong_model_message(folder, kind)
        if wrong:
            raise InputError(wrong)
        if not (folder / cls.manifest_name).exists():
            raise MissingFileError(missing, folder)

    @classmethod
    def read_manifest(cls, folder: Path) -> dict[str, Any]:
        """The manifest in ``folder``, its format checked (`check_format`)."""
        meta = read_json(folder / cls.manifest_name)
        cls.check_format(meta, folder)
        return meta

    @classmethod
    def check_format(cls, meta: dict[str, Any], folder: Path) -> None:
        """Refuse a manifest this version cannot read (`ModelFormatError`, saying to
        retrain)."""
        fmt = meta.get("format", cls.unversioned_format)
        if fmt in cls.read_formats:
            return
        saved_by = meta.get("versions", {}).get("tagalign", "another version")
        raise ModelFormatError(
            f"{cls.kind} {folder} was saved by tagalign {saved_by} in model format {fmt}; "
            f"this version ({versions().get('tagalign')}) reads formats "
            f"{', '.join(map(str, cls.read_formats))}: retrain {cls.retrain} or use the "
            "tagalign that saved it")
