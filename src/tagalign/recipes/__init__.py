"""Named recipes (strategies) that train a tagger; see `recipe_names` and `get_recipe`.

Built-in recipes are imported on first use, so ``tagalign --help`` does not pay for torch
and sentence-transformers.
"""

from tagalign.recipes.base import (
    RECIPES,
    ReadOnlyError,
    Recipe,
    SearchSpace,
    TrialRun,
    get_recipe,
    read_only_message,
    recipe_names,
    register_recipe,
)

__all__ = ["RECIPES", "ReadOnlyError", "Recipe", "SearchSpace", "TrialRun", "get_recipe",
           "read_only_message", "recipe_names", "register_recipe"]
