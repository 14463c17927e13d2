"""A project folder's names, its errors and the settings read from its config (no model,
no vocabulary: cheap to import and to call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tagalign.errors import ConflictError, NotFoundError, PermissionDeniedError, TagalignError
from tagalign.runtime import DEFAULT_LIMIT

CONFIG_NAME = "project.json"
MODEL_DIR = "model"
WORK_DIR = "work"
DEFAULT_RECIPE = "hybrid"
#: per-language defaults (``optimize --per-language --save``) live under this config key
BY_LANGUAGE = "defaults_by_language"
#: names of the parameters `set_params` changed after training (`tagalign hyperopt --save`)
TUNED = "tuned_params"
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


def _without(params: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in keys}


class LearningNotAllowedError(PermissionDeniedError):
    """The project is not configured to learn from API requests (``allow_learn``)."""
