"""Named recipes (strategies) that train a tagger; see `RECIPES`."""

from tagalign.train.recipes.base import RECIPES, Recipe, get_recipe, register_recipe

__all__ = ["RECIPES", "Recipe", "get_recipe", "register_recipe"]
