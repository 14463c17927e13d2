"""A project folder's names, its errors and its config, ``project.json`` as a typed
`ProjectConfig` (no model, no vocabulary: cheap to import and to call)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tagalign.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    PermissionDeniedError,
    TagalignError,
)
from tagalign.io import read_json
from tagalign.model_files import ModelFamily
from tagalign.runtime import DEFAULT_LIMIT

CONFIG_NAME = "project.json"
MODEL_DIR = "model"
WORK_DIR = "work"
DEFAULT_RECIPE = "hybrid"
#: the recipe parameters a project asked for, kept in its config only until training writes
#: the model, whose manifest then holds the one copy (`saved_params`)
PARAMS = "params"
#: the trained model's manifest (`tagalign.recipes.Recipe.manifest_name`, spelled here so
#: reading a folder's parameters imports no recipe)
MODEL_MANIFEST = "recipe.json"
#: a project's own feedback store when no URL is given (`feedback_location`)
FEEDBACK_FILE = "feedback.sqlite"


class ProjectError(TagalignError):
    """A project folder is missing or holds another project (see the two subclasses)."""


class NotAProjectError(ProjectError, NotFoundError):
    """The folder holds no ``project.json``."""


class ProjectExistsError(ProjectError, ConflictError):
    """The folder already holds a project with another recipe or other parameters."""


@dataclass
class ProjectConfig:
    """``PROJECT/project.json`` as a typed object: each key this version knows a field,
    the others kept as read (`extra`) and written back; keys are written in the order the
    file had them, new ones after (so a file read and written unchanged is the same)."""

    format: str | None = None
    name: str | None = None
    recipe: str | None = None
    #: the recipe parameters asked for, kept only until training writes the model (whose
    #: manifest then holds the one copy: `saved_params`); None: not kept
    params: dict[str, Any] | None = None
    #: the vocabulary's ``size``, ``fingerprint`` and ``languages``
    vocabulary: dict[str, Any] = field(default_factory=dict)
    created: str | None = None
    trained_at: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    #: the dev scores of the last `tagalign train` or `eval --save` (`Project.set_scores`)
    dev_scores: dict[str, Any] | None = None
    #: what a request without them gets (`Project.set_defaults`; None: not saved)
    limit: int | None = None
    threshold: float | None = None
    #: per-language limit and threshold (``optimize --per-language --save``)
    defaults_by_language: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: names of the parameters `Project.set_params` changed after training (`tagalign
    #: hyperopt --save`): the project's history, not a model parameter
    tuned_params: list[str] = field(default_factory=list)
    #: keys this version does not know, kept as read
    extra: dict[str, Any] = field(default_factory=dict)
    _keys: list[str] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProjectConfig:
        """The config of a ``project.json``'s content (any version's: unknown keys kept)."""
        known = _fields()
        return cls(**{k: v for k, v in data.items() if k in known},
                   extra={k: v for k, v in data.items() if k not in known}, _keys=list(data))

    def to_json(self) -> dict[str, Any]:
        """The content of ``project.json``: the keys read, in their order, then the fields
        set since (an unset one, None or empty, is left out)."""
        values = {name: getattr(self, name) for name in _fields()} | self.extra
        out = {key: values[key] for key in self._keys if key in values}
        out |= {key: value for key, value in values.items()
                if key not in out and value not in (None, {}, [])}
        self._keys = list(out)
        return out

    def drop_params(self) -> None:
        """The model is written: its manifest holds the parameters from now on."""
        self.params = None
        self._keys = [k for k in self._keys if k != PARAMS]

    def makes_same_model(self, path: Path | str, recipe: type[ModelFamily],
                         params: dict[str, Any]) -> bool:
        """Whether ``recipe`` with ``params`` makes the model of this project (at ``path``):
        the parameters tuned after training (``tuned_params``) are the project's own, so a
        rerun of `tagalign train` without them continues the same project."""
        return self.recipe == recipe.name and not recipe.differing_params(
            saved_params(path, self), params, ignore=set(self.tuned_params))

    def set_defaults(self, limit: int, threshold: float, language: str | None = None
                     ) -> None:
        """`Project.set_defaults` (for one language only with ``language``)."""
        if limit < 1 or not 0.0 <= threshold <= 1.0:
            raise InputError(f"limit must be ≥ 1 and threshold in [0, 1], got {limit}, "
                             f"{threshold}")
        limit, threshold = int(limit), round(float(threshold), 6)
        if language is None:
            self.limit, self.threshold = limit, threshold
        else:
            self.defaults_by_language[language] = {"limit": limit, "threshold": threshold}

    def defaults(self, language: str | None = None, fallback_limit: int = DEFAULT_LIMIT
                 ) -> tuple[int, float]:
        """``(limit, threshold)`` saved for ``language`` (``defaults_by_language``), else
        for the project, else ``fallback_limit`` and 0.0 (`Project.defaults`)."""
        own = self.defaults_by_language.get(language or "", {})
        limit = own.get("limit", self.limit if self.limit is not None else fallback_limit)
        threshold = own.get("threshold", self.threshold if self.threshold is not None
                            else 0.0)
        return int(limit), float(threshold)


@functools.cache
def _fields() -> frozenset[str]:
    return frozenset(f.name for f in fields(ProjectConfig)) - {"extra", "_keys"}


def feedback_location(path: Path | str, project_db: str | None = None,
                      override: str | None = None) -> tuple[str, str]:
    """Where a project's feedback lives, found alike by serve, train and feedback export:
    (SQLAlchemy URL, the project key its rows carry). URL: ``override`` (--feedback-db),
    else ``project_db`` (the projects file's feedback_db), else PROJECT/feedback.sqlite.
    Key: the folder's name, whatever id a projects file serves it under."""
    path = Path(path).resolve()
    return override or project_db or f"sqlite:///{path / FEEDBACK_FILE}", path.name


def require_project(path: Path, hint: str = "") -> None:
    """`NotAProjectError` for a folder without ``project.json`` (``hint``: what to do)."""
    if not (path / CONFIG_NAME).exists():
        raise NotAProjectError(f"{path} is not a tagalign project (no {CONFIG_NAME}){hint}")


def read_project_config(path: Path | str, hint: str = "") -> ProjectConfig:
    """``PROJECT/project.json`` as this version keeps it.

    Migrated on read: a project saved before the model's manifest held the one copy of the
    recipe's parameters has them in both files; the model's copy wins (it is what the model
    was trained with and what ``set_params`` tuned since), so the config's is dropped here
    and vanishes from the file at its next write. The config's stays while it asks for a
    model not written yet (``trained_at`` unset: ``train --overwrite`` of a trained folder,
    whose old model still answers until the new one replaces it)."""
    path = Path(path)
    require_project(path, hint)
    config = ProjectConfig.from_json(read_json(path / CONFIG_NAME))
    if config.trained_at and (path / MODEL_DIR / MODEL_MANIFEST).exists():
        config.drop_params()
    return config


def saved_params(path: Path | str, config: ProjectConfig) -> dict[str, Any]:
    """The recipe parameters of the project at ``path`` (``config``: its project.json, read
    by `read_project_config`): those asked for and not trained yet (`PARAMS`, the given
    ones only), else the trained model's, from its manifest (every parameter)."""
    if config.params is not None:
        return dict(config.params)
    manifest = Path(path) / MODEL_DIR / MODEL_MANIFEST
    return dict(read_json(manifest)["params"]) if manifest.exists() else {}


class LearningNotAllowedError(PermissionDeniedError):
    """The project is not configured to learn from API requests (``allow_learn``)."""
