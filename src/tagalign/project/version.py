"""Which trained model a project folder holds: a short hash of its manifest and its time.

The manifest ``PROJECT/model/recipe.json`` (`tagalign.recipes.saved`) is written last into
the model folder, which replaces the old one in one rename (`tagalign.io.atomic_dir`); it
names the recipe, its parameters, the vocabulary, the time the model was saved and a
random id of the save. So its bytes tell two models apart: retraining, `tagalign hyperopt
--save` and `tagalign download --force` of another model all change them, and an unchanged
folder (or the same archive downloaded again) keeps them. (A model saved before the id
existed is told apart by its time, to the second.) A server
compares the version of the folder with the one it serves to know whether a reload has
anything to do (`tagalign.serve.reload`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagalign.project.config import MODEL_DIR
from tagalign.recipes.saved import MANIFEST

#: hex digits of the manifest's SHA-256 that name a version (48 bits: no collisions between
#: the few models one folder ever holds, short enough to read in a log line or a header)
VERSION_DIGITS = 12


@dataclass(frozen=True)
class ModelVersion:
    """``version``: the first `VERSION_DIGITS` hex digits of the manifest's SHA-256;
    ``trained_at``: when the model was saved (the manifest's ISO time; None in a manifest
    written before it had one)."""

    version: str
    trained_at: str | None

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "trained_at": self.trained_at}


def model_version(project: Any) -> ModelVersion | None:
    """The version of the model in a project folder (a `Project` or its path); None when
    the folder holds no trained model. Reads one small file: cheap enough to ask per
    request."""
    folder = Path(getattr(project, "path", project))
    try:
        raw = (folder / MODEL_DIR / MANIFEST).read_bytes()
    except FileNotFoundError:
        return None
    try:
        saved = json.loads(raw).get("saved")
    except (ValueError, AttributeError):  # a broken manifest still has a version: loading
        saved = None                      # it fails and says why
    return ModelVersion(hashlib.sha256(raw).hexdigest()[:VERSION_DIGITS],
                        saved if isinstance(saved, str) else None)


__all__ = ["VERSION_DIGITS", "ModelVersion", "model_version"]
