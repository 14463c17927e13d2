"""Which model a project folder holds: a short version id and when it was trained.

The server shows both (``GET`` project, the ``tagalign_model_info`` metric), so a
dashboard or a client sees when a reload brought in another model. The version is a hash
of the model's manifest ``model/recipe.json`` (`tagalign.recipes.saved`): it holds the
recipe, its parameters, the vocabulary's fingerprint, the package versions and the time it
was saved, so every training — and every change of parameters after training (`tagalign
hyperopt --save` rewrites it) — gives another version, while copying or shipping the
folder keeps it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from tagalign.project.config import MODEL_DIR
from tagalign.recipes.saved import MANIFEST

if TYPE_CHECKING:
    from tagalign.project.folder import Project

#: hex digits of the version: 48 bits, as a short git hash, plenty for one project's models
VERSION_CHARS = 12


class ModelVersion(TypedDict):
    """``version``: the manifest's SHA-256, `VERSION_CHARS` hex digits; ``trained_at``:
    ISO 8601 time the model was saved. Both None for a folder without a trained model."""

    version: str | None
    trained_at: str | None


def model_version(project_or_path: Project | Path | str) -> ModelVersion:
    """The `ModelVersion` of a `Project` (or a project folder's path), read from its
    manifest on disk (a few kilobytes): what a reload would load, or has loaded."""
    path = project_or_path if isinstance(project_or_path, Path | str) else project_or_path.path
    folder = Path(path) / MODEL_DIR
    try:
        raw = (folder / MANIFEST).read_bytes()
    except FileNotFoundError:
        return ModelVersion(version=None, trained_at=None)
    trained_at = None
    # a manifest that is not a JSON object still has a version (loading will refuse it)
    with contextlib.suppress(ValueError, AttributeError):
        trained_at = json.loads(raw).get("saved")
    if not isinstance(trained_at, str):  # manifests of format 1 may predate the key
        mtime = (folder / MANIFEST).stat().st_mtime
        trained_at = _dt.datetime.fromtimestamp(mtime, _dt.UTC).isoformat(timespec="seconds")
    return ModelVersion(version=hashlib.sha256(raw).hexdigest()[:VERSION_CHARS],
                        trained_at=trained_at)


__all__ = ["VERSION_CHARS", "ModelVersion", "model_version"]
