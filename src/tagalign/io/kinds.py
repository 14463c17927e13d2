"""Saved folders: which kind of model a folder holds, and the versions that wrote it.

This layer knows no kind itself. Each package that saves a model folder registers how to
recognise its own (`register_kind`, from its small JSON files only), so a command given
the wrong folder says what the folder holds and which command reads it, before loading a
model. `model_kind` knows the kinds registered so far: the CLI imports every package
that registers one before it asks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagalign.io.atomic import read_json


@dataclass(frozen=True)
class ModelKind:
    """``description``: what the folder holds and the command that reads it (``a
    classifier, read by `tagalign classify predict```); the part before the first comma
    names the kind in a refusal."""

    name: str
    description: str
    recognise: Callable[[Path], bool]

    @property
    def short(self) -> str:
        return self.description.split(",")[0]


#: kinds of saved folder by name, in registration order (`model_kind` tries them so)
MODEL_KINDS: dict[str, ModelKind] = {}


def register_kind(name: str, description: str, recognise: Callable[[Path], bool]) -> ModelKind:
    """Add (or replace) the kind ``name``; ``recognise(folder)`` must not load a model and
    must not raise for a folder of another kind."""
    kind = MODEL_KINDS[name] = ModelKind(name, description, recognise)
    return kind


def json_object(path: Path) -> dict[str, Any] | None:
    """A small JSON file's object for a recogniser (None: missing, unreadable or not an
    object)."""
    if not path.is_file():
        return None
    try:
        obj = read_json(path)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def model_kind(folder: Path) -> str | None:
    """The name of the first registered kind that recognises ``folder``, None if none."""
    folder = Path(folder)
    for kind in list(MODEL_KINDS.values()):
        if kind.recognise(folder):
            return kind.name
    return None


def wrong_model_message(folder: Path, want: str) -> str | None:
    """The refusal for a folder holding another kind of model than ``want`` (None: it
    holds ``want``, or nothing we know, which the loader then reports)."""
    kind = model_kind(folder)
    if kind is None or kind == want:
        return None
    wanted = MODEL_KINDS[want].short if want in MODEL_KINDS else want
    return f"{folder} holds {MODEL_KINDS[kind].description}, not {wanted}"


def versions() -> dict[str, str]:
    """Versions of the packages whose behaviour an artifact depends on."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for pkg in ("tagalign", "numpy", "torch", "sentence-transformers", "scikit-learn",
                "faiss-cpu", "omikuji", "lightgbm"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out
