"""Graded word-in-context (CoMeDi): the pair scorer, its lemma-grouped cross-validation."""
