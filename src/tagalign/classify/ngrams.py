"""`linear-ngrams`: the `linear` baseline with richer features — the default of
`tagalign classify` (the best dev micro-F1 measured, `benchmarks/domains_variants.py` of 6a2d4a2).

Features, each L2-normalised TF-IDF (sublinear tf) and stacked side by side:

- words: the project's stemmed tokens (`tagalign.text.Analyzer`, each record in its own
  language, both languages in one space) and, with ``word_ngrams=2``, their bigrams;
- characters: ``char_ngrams`` (min, max) character n-grams within words (scikit-learn's
  ``char_wb``) of the first ``char_chars`` characters of the text (the title and the
  opening of the abstract; ``char_chars=0`` turns them off) — word parts that stemming
  misses (compounds such as *Werkstoff*/*Werkstoffprüfung*).

One-vs-rest logistic regression (liblinear, ``C``, optional ``class_weight="balanced"``),
thresholds tuned like every recipe. Saved as two TF-IDF vocabularies/idf (JSON + npy) and
the coefficient matrix (npy), no pickle.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.classify.base import limit_examples, register_classifier
from tagalign.classify.config import LinearNgramsConfig
from tagalign.classify.data import Example
from tagalign.classify.linear import LinearClassifier
from tagalign.text.tfidf import TfidfFeaturizer

WORDS, CHARS = "words", "chars"


def with_bigrams(tokens: list[str]) -> list[str]:
    """Tokens plus their adjacent pairs (``"a b"``)."""
    return tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]


@register_classifier
class NgramLinearClassifier(LinearClassifier):
    name = "linear-ngrams"
    config_class = LinearNgramsConfig
    config: LinearNgramsConfig
    #: threads are the runtime's (`Classifier.runtime`), not a model parameter
    retired = frozenset({"threads"})

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.chars_: TfidfFeaturizer | None = None

    def _char_tokens(self, examples: Sequence[Example]) -> list[list[str]]:
        from sklearn.feature_extraction.text import TfidfVectorizer

        lo, hi = self.config.char_ngrams
        grams = TfidfVectorizer(analyzer="char_wb", ngram_range=(int(lo), int(hi)),
                                lowercase=True).build_analyzer()
        n = self.config.char_chars
        return [grams(ex.text[:n]) for ex in examples]

    def _word_tokens(self, examples: Sequence[Example]) -> list[list[str]]:
        tokens = self._features(examples)
        return [with_bigrams(t) for t in tokens] if self.config.word_ngrams == 2 \
            else tokens

    def _stack(self, examples: Sequence[Example], fit: bool):
        import scipy.sparse as sp

        parts = []
        spaces = [(WORDS, self._word_tokens)]
        if self.config.char_chars:
            spaces.append((CHARS, self._char_tokens))
        steps = 2 * len(spaces)  # each space: its tokens, then its TF-IDF
        for i, (space, make) in enumerate(spaces):
            self._tick("features", 2 * i, steps)
            tokens = make(examples)
            self._tick("features", 2 * i + 1, steps)
            if fit:
                featurizer = TfidfFeaturizer([space], min_df=self.config.min_df,
                                             max_df=self.config.max_df)
                featurizer.fit(tokens, [space] * len(tokens))
                if space == WORDS:
                    self.tfidf_ = featurizer
                else:
                    self.chars_ = featurizer
            featurizer = self._trained(self.tfidf_ if space == WORDS else self.chars_)
            routed = featurizer.transform(tokens, [space] * len(tokens))
            parts.append(routed[space][1] if space in routed else
                         sp.csr_matrix((len(tokens), featurizer.n_features(space)),
                                       dtype=np.float32))
        self._tick("features", steps, steps)
        x = sp.hstack(parts).tocsr()
        x.sum_duplicates()
        x.sort_indices()
        return x

    def _fit(self, train: Sequence[Example], y: np.ndarray) -> None:
        from sklearn.linear_model import LogisticRegression

        c = self.config
        train, y = limit_examples(train, y, c.limit_train, c.seed)
        x = self._stack(train, fit=True)
        self._fit_one_vs_rest(x, y, LogisticRegression(
            C=c.C, solver="liblinear", max_iter=c.max_iter,
            class_weight=c.class_weight, random_state=c.seed),
            threads=self.runtime.threads_or(1))

    def _matrix(self, examples: Sequence[Example]):
        return self._stack(examples, fit=False)

    def _save_state(self, folder: Path) -> None:
        super()._save_state(folder)
        if self.chars_ is not None:
            self.chars_.save(folder / "tfidf-chars")

    def _load_state(self, folder: Path) -> None:
        super()._load_state(folder)
        if self.config.char_chars:
            self.chars_ = TfidfFeaturizer.load(folder / "tfidf-chars")
