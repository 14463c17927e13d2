"""How well the taggers tag: the headline hybrid, the recipes, tuning, quality estimates,
language identification."""
