"""Named recipes (strategies) that train a tagger; see `RECIPES`."""

from tagalign.train.recipes.base import RECIPES, Recipe, get_recipe, register_recipe

# Importing a recipe module registers it.
from tagalign.train.recipes import (  # noqa: E402,F401  isort: skip
    focused,
    hybrid,
    lexical,
    nbf,
    ynu,
    zero_shot,
)

__all__ = ["RECIPES", "Recipe", "get_recipe", "register_recipe"]
