"""`linear`: the plain baseline a practitioner tries first — TF-IDF over the project's
stemmed tokens (`tagalign.text.Analyzer`, `tagalign.text.tfidf.TfidfFeaturizer`) and
one-vs-rest logistic regression (scikit-learn); thresholds tuned like every recipe.

German and English records share one feature space (each stemmed in its own language), so
one model serves both. Saved as the TF-IDF vocabulary/idf and the coefficient matrix (npy).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tagalign.classify.base import Classifier, limit_examples, register_classifier
from tagalign.classify.config import LinearConfig, LinearNgramsConfig
from tagalign.classify.data import Example
from tagalign.errors import ModelFormatError
from tagalign.io import load_npy, save_npy_atomic
from tagalign.params import PartConfig
from tagalign.text.analyzer import Analyzer, guess_language
from tagalign.text.tfidf import TfidfFeaturizer

SPACE = "all"  # the single TF-IDF space of both languages


@register_classifier
class LinearClassifier(Classifier):
    name = "linear"
    config_class: ClassVar[type[PartConfig]] = LinearConfig
    #: `linear-ngrams` (a subclass) has its own config, with the same shared fields
    config: LinearConfig | LinearNgramsConfig

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.analyzer = Analyzer()
        self.tfidf_: TfidfFeaturizer | None = None
        self.coef_: np.ndarray | None = None
        self.intercept_: np.ndarray | None = None

    def _features(self, examples: Sequence[Example]):
        tokens = []
        tokenised = False
        for i, ex in enumerate(examples):
            if ex.tokens is not None:
                tokens.append(ex.tokens)
                continue
            lang = ex.language if ex.language in ("de", "en") else guess_language(ex.text)
            tokens.append(self.analyzer.tokens(ex.text, lang))
            tokenised = True
            if i % 2000 == 0:
                self._tick("tokenising", i, len(examples))
        if tokenised:  # the bar ends full
            self._tick("tokenising", len(examples), len(examples))
        return tokens

    def _matrix(self, examples: Sequence[Example]):
        import scipy.sparse as sp

        tokens = self._features(examples)
        routed = self._trained(self.tfidf_).transform(tokens, [SPACE] * len(tokens))
        if SPACE not in routed:
            return sp.csr_matrix((len(tokens), self._trained(self.coef_).shape[1]),
                                 dtype=np.float32)
        return routed[SPACE][1]

    def _fit(self, train: Sequence[Example], y: np.ndarray) -> None:
        from sklearn.linear_model import LogisticRegression

        c = self.config
        train, y = limit_examples(train, y, c.limit_train, c.seed)
        tokens = self._features(train)
        self.tfidf_ = TfidfFeaturizer([SPACE], min_df=c.min_df, max_df=c.max_df)
        self.tfidf_.fit(tokens, [SPACE] * len(tokens))
        x = self.tfidf_.transform(tokens, [SPACE] * len(tokens))[SPACE][1]
        self._fit_one_vs_rest(x, y, LogisticRegression(C=c.C, solver="liblinear",
                                                       max_iter=c.max_iter,
                                                       random_state=c.seed))

    def _fit_one_vs_rest(self, x, y: np.ndarray, estimator, threads: int = 1) -> None:
        """``coef_``/``intercept_`` of one binary ``estimator`` per label, fitted on
        ``x`` and that label's column of ``y`` (what scikit-learn's ``OneVsRestClassifier``
        fits, the same models) in ``threads`` threads (liblinear releases the GIL). A label
        at a time, so that the phase ``logistic regression`` counts labels: on all
        training records it is the step of the text model that takes minutes. A label on
        every training record, or on none (a --label-set label without examples), gets a
        constant score, as the one-vs-rest model's constant predictor."""
        from concurrent.futures import ThreadPoolExecutor, as_completed

        from sklearn.base import clone

        labels = y.shape[1]
        coef = np.zeros((labels, x.shape[1]), np.float32)
        intercept = np.zeros(labels, np.float32)
        todo = []
        for j in range(labels):
            if y[:, j].min() == y[:, j].max():
                intercept[j] = 20.0 if y[:, j].all() else -20.0
            else:
                todo.append(j)

        def fit(j: int):
            return clone(estimator).fit(x, y[:, j].astype(int))

        done = labels - len(todo)
        self._tick("logistic regression", done, labels)
        with ThreadPoolExecutor(max(1, threads)) as pool:
            futures = {pool.submit(fit, j): j for j in todo}
            for future in as_completed(futures):
                j, est = futures[future], future.result()
                coef[j], intercept[j] = est.coef_.ravel(), float(est.intercept_[0])
                done += 1
                self._tick("logistic regression", done, labels)
        self.coef_, self.intercept_ = coef, intercept

    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        if not examples:
            return np.zeros((0, len(self.label_set)), np.float32)
        logits = np.asarray(self._matrix(examples) @ self._trained(self.coef_).T) + self.intercept_
        return (1 / (1 + np.exp(-logits))).astype(np.float32)

    def _save_state(self, folder: Path) -> None:
        self._trained(self.tfidf_).save(folder / "tfidf")
        save_npy_atomic(folder / "coef.npy", self._trained(self.coef_))
        save_npy_atomic(folder / "intercept.npy", self._trained(self.intercept_))

    def _load_state(self, folder: Path) -> None:
        self.tfidf_ = TfidfFeaturizer.load(folder / "tfidf")
        self.coef_ = load_npy(folder / "coef.npy")
        self.intercept_ = load_npy(folder / "intercept.npy")
        if self.coef_.shape[0] != len(self.label_set):
            raise ModelFormatError(f"{folder}: coef.npy has {self.coef_.shape[0]} rows for "
                                   f"{len(self.label_set)} labels")
