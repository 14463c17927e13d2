"""`lexical` — zero-shot suggestions from the vocabulary alone (no training records).

Subject labels found in the text (see `tagalign.suggest.sources.lexical`), scored by a
fixed rule: longer labels, labels in the title and repeated labels score higher. It is
what `make demo` falls back to when no records are available.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.params import PartConfig, Positive
from tagalign.recipes.base import Recipe, register_recipe
from tagalign.records import Record
from tagalign.suggest import Suggestion
from tagalign.suggest.sources.base import Batch, Candidates, FitContext
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.text import Analyzer
from tagalign.vocab import Vocabulary

#: the lexical source's features the rule reads (``lex_prec`` is the ranker's)
RULE_FEATURES = ["lex_count", "lex_in_title", "lex_ntokens", "lex_first", "lex_pref",
                 "lex_ambiguity"]


def rule_score(cands: Candidates) -> np.ndarray:
    """1 − exp(−evidence); evidence grows with count, title match and label length."""
    cols = [cands.names.index(name) for name in RULE_FEATURES]
    count, in_title, ntok, first, pref, ambig = cands.feats[:, cols].T
    evidence = (0.3 * np.log1p(count) + 0.5 * in_title + 0.25 * ntok + 0.2 * (1 - first)
                + 0.1 * pref) / np.maximum(ambig, 1)
    return 1 - np.exp(-evidence)


@dataclass(frozen=True)
class LexicalConfig(PartConfig):
    """Labels of at most ``max_ngram`` words are looked for."""

    max_ngram: Positive = 5


@register_recipe
class LexicalRecipe(Recipe):
    name = "lexical"
    config_class = LexicalConfig
    config: LexicalConfig

    def __init__(self, vocab: Vocabulary, **params: Any):
        super().__init__(vocab, **params)
        self.analyzer = Analyzer()
        self.matcher_: LabelMatcher | None = None

    def _context(self) -> FitContext:
        """The vocabulary alone: this recipe learns from no records."""
        return FitContext(self.vocab, self.analyzer)

    def _matcher(self) -> LabelMatcher:
        """The label matcher of this recipe: each language's own labels only (the hybrid's
        lexical source also looks for German labels in English texts)."""
        return LabelMatcher(max_ngram=self.config.max_ngram, cross_language=False)

    def fit(self, records: Sequence[Record], *, workdir: Path) -> None:
        self.matcher_ = self._matcher()
        self.matcher_.fit(self._context())

    def _suggest(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        batch = Batch.tokenised(records, self.analyzer)
        langs = batch.languages
        matcher = self._trained(self.matcher_)
        cands = matcher.candidates(batch)
        scores = rule_score(cands) if len(cands.rows) else np.zeros(0)
        out: list[list[Suggestion]] = [[] for _ in records]
        for r, c, s in sorted(zip(cands.rows.tolist(), cands.cols.tolist(), scores.tolist(),
                                  strict=True), key=lambda x: (x[0], -x[2])):
            if len(out[r]) < limit:
                subj = self.vocab.subjects[c]
                why: dict[str, Any] = {"sources": ["lexical"],
                                       "label_match": subj.label(langs[r])}
                alt = matcher.matched_alt(batch, r, c)
                if alt is not None:  # found through an alternative label
                    why["matched"] = alt
                out[r].append(Suggestion(subj.id, s, subj.label(langs[r]), why))
        return out

    def _save_state(self, path: Path) -> None:
        self._trained(self.matcher_).save(path)

    def _load_state(self, path: Path, *, mmap: bool = False) -> None:  # nothing to map
        self.matcher_ = self._matcher()
        self.matcher_.load_state(path, self._context())
