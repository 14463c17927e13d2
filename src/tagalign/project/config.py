"""A project folder's names, its errors and the settings read from its config (no model,
no vocabulary: cheap to import and to call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tagalign.errors import ConflictError, NotFoundError, PermissionDeniedError, TagalignError
from tagalign.io import read_json
from tagalign.runtime import DEFAULT_LIMIT

CONFIG_NAME = "project.json"
MODEL_DIR = "model"
WORK_DIR = "work"
DEFAULT_RECIPE = "hybrid"
#: per-language defaults (``optimize --per-language --save``) live under this config key
BY_LANGUAGE = "defaults_by_language"
#: the recipe parameters a project asked for, kept in its config only until training writes
#: the model, whose manifest then holds the one copy (`saved_params`)
PARAMS = "params"
#: names of the parameters `set_params` changed after training (`tagalign hyperopt --save`):
#: the project's history, not a model parameter (their values are in the model's manifest)
TUNED = "tuned_params"
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


def config_defaults(config: dict[str, Any], language: str | None = None,
                    fallback_limit: int = DEFAULT_LIMIT) -> tuple[int, float]:
    """`Project.defaults` of a project's config (`Project.read_config`)."""
    own = config.get(BY_LANGUAGE, {}).get(language or "", {})
    limit = own.get("limit", config.get("limit", fallback_limit))
    threshold = own.get("threshold", config.get("threshold", 0.0))
    return int(limit), float(threshold)


def feedback_location(path: Path | str, project_db: str | None = None,
                      override: str | None = None) -> tuple[str, str]:
    """Where a project's feedback lives, found alike by serve, train and feedback export:
    (SQLAlchemy URL, the project key its rows carry). URL: ``override`` (--feedback-db),
    else ``project_db`` (the projects file's feedback_db), else PROJECT/feedback.sqlite.
    Key: the folder's name, whatever id a projects file serves it under."""
    path = Path(path).resolve()
    return override or project_db or f"sqlite:///{path / FEEDBACK_FILE}", path.name


def read_project_config(path: Path | str) -> dict[str, Any]:
    """``PROJECT/project.json`` as this version keeps it.

    Migrated on read: a project saved before the model's manifest held the one copy of the
    recipe's parameters has them in both files; the model's copy wins (it is what the model
    was trained with and what ``set_params`` tuned since), so the config's is dropped here
    and vanishes from the file at its next write. The config's stays while it asks for a
    model not written yet (``trained_at`` unset: ``train --overwrite`` of a trained folder,
    whose old model still answers until the new one replaces it)."""
    path = Path(path)
    config = read_json(path / CONFIG_NAME)
    if config.get("trained_at") and (path / MODEL_DIR / MODEL_MANIFEST).exists():
        config.pop(PARAMS, None)
    return config


def saved_params(path: Path | str, config: dict[str, Any]) -> dict[str, Any]:
    """The recipe parameters of the project at ``path`` (``config``: its project.json, read
    by `read_project_config`): those asked for and not trained yet (`PARAMS`, the given
    ones only), else the trained model's, from its manifest (every parameter)."""
    if PARAMS in config:
        return dict(config[PARAMS] or {})
    manifest = Path(path) / MODEL_DIR / MODEL_MANIFEST
    return dict(read_json(manifest)["params"]) if manifest.exists() else {}


class LearningNotAllowedError(PermissionDeniedError):
    """The project is not configured to learn from API requests (``allow_learn``)."""
