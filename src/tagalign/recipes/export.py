"""Which subject index a trained dense recipe searches (for exports)."""

from __future__ import annotations

from typing import Any


def subject_index_of(recipe: Any, model: str | None = None):
    """(subject positions, VectorIndex, label language) of a dense recipe."""
    models = getattr(recipe, "models_", None)
    if models:
        key = model or next(iter(models))
        if key not in models:
            raise ValueError(f"no model {key!r}; this project has {sorted(models)}")
        return recipe.positions_, models[key][1], "de" if key == "all" else key
    if getattr(recipe, "index_", None) is None:
        raise ValueError(f"recipe {recipe.name!r} has no subject vector index to export")
    return recipe.positions_, recipe.index_, recipe.params.get("subject_language", "de")
