"""Training: recipes, losses and heads."""
