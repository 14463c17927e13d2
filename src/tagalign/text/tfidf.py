"""Per-language TF-IDF features over stemmed tokens (shared by Omikuji and TF-IDF kNN)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

from tagalign.errors import InputError
from tagalign.io import load_npy, read_json, save_npy_atomic, write_json_atomic


def _identity(tokens: list[str]) -> list[str]:
    return tokens


def _tfidf_rows(vec: TfidfVectorizer, docs: Sequence[list[str]]) -> sp.csr_matrix:
    """``vec.transform(docs)`` for a fitted vectorizer over token lists, without
    scikit-learn's per-call validation and configuration work, which costs about 1.3 ms
    a call: a single-record suggest paid it once per request (issue 23). The same steps
    as scikit-learn's: counts of known tokens, sorted indices, 1 + log(tf) when sublinear,
    times idf, rows L2-normalised (squares summed in double, like its Cython kernel);
    tests/test_tfidf.py checks the output against ``vec.transform``."""
    vocab = vec.vocabulary_
    indptr = [0]
    indices: list[int] = []
    counts: list[int] = []
    for doc in docs:
        row: dict[int, int] = {}
        for token in doc:
            j = vocab.get(token)
            if j is not None:
                row[j] = row.get(j, 0) + 1
        for j in sorted(row):
            indices.append(j)
            counts.append(row[j])
        indptr.append(len(indices))
    data = np.asarray(counts, dtype=np.float32)
    ind = np.asarray(indices, dtype=np.int32)
    if vec.sublinear_tf:
        np.log(data, data)
        data += 1.0
    data *= vec.idf_[ind]
    ptr = np.asarray(indptr, dtype=np.int64)
    lengths = np.diff(ptr)
    rows = np.repeat(np.arange(len(docs)), lengths)
    norms = np.sqrt(np.bincount(rows, weights=(data * data).astype(np.float64),
                                minlength=len(docs)))
    norms[norms == 0] = 1.0
    data = (data / np.repeat(norms, lengths)).astype(np.float32)
    return sp.csr_matrix((data, ind, ptr), shape=(len(docs), len(vocab)))


def _vectorizer(min_df: int | float, max_df: float, sublinear_tf: bool) -> TfidfVectorizer:
    return TfidfVectorizer(analyzer=_identity, sublinear_tf=sublinear_tf, min_df=min_df,
                           max_df=max_df, dtype=np.float32)


class TfidfFeaturizer:
    """One TF-IDF vectorizer per language (``de``, ``en``); other languages use ``de``."""

    def __init__(self, languages: Sequence[str] = ("de", "en"), min_df: int = 2,
                 max_df: float = 0.5, sublinear_tf: bool = True):
        self.languages = list(languages)
        self.min_df = min_df
        self.max_df = max_df
        self.sublinear_tf = sublinear_tf
        self.vectorizers_: dict[str, TfidfVectorizer] = {}

    def lang_of(self, lang: str | None) -> str:
        return lang if lang in self.vectorizers_ else self.languages[0]

    def fit(self, tokens: Sequence[list[str]], languages: Sequence[str]) -> TfidfFeaturizer:
        for lang in self.languages:
            docs = [t for t, lg in zip(tokens, languages, strict=True) if lg == lang]
            if len(docs) < 2:
                continue
            vec = _vectorizer(self.min_df, self.max_df, self.sublinear_tf)
            self.vectorizers_[lang] = vec.fit(docs)
        if not self.vectorizers_:
            raise InputError("too few training records to fit TF-IDF features")
        return self

    def n_features(self, lang: str) -> int:
        return len(self.vectorizers_[lang].vocabulary_)

    def transform(self, tokens: Sequence[list[str]], languages: Sequence[str]
                  ) -> dict[str, tuple[np.ndarray, sp.csr_matrix]]:
        """Rows grouped by language: ``{lang: (row indices, L2-normalised csr)}``."""
        routed = np.array([self.lang_of(lg) for lg in languages]) if len(languages) else \
            np.zeros(0, dtype=str)
        out = {}
        for lang, vec in self.vectorizers_.items():
            idx = np.flatnonzero(routed == lang)
            if len(idx):
                out[lang] = (idx, _tfidf_rows(vec, [tokens[int(i)] for i in idx]))
        return out

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        meta: dict[str, Any] = {
            "languages": self.languages, "min_df": self.min_df, "max_df": self.max_df,
            "sublinear_tf": self.sublinear_tf, "vocabularies": {}}
        for lang, vec in self.vectorizers_.items():
            terms = sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__)
            meta["vocabularies"][lang] = terms
            save_npy_atomic(path / f"idf-{lang}.npy", vec.idf_.astype(np.float64))
        write_json_atomic(path / "tfidf.json", meta)

    @classmethod
    def load(cls, path: Path) -> TfidfFeaturizer:
        meta = read_json(path / "tfidf.json")
        self = cls(meta["languages"], meta["min_df"], meta["max_df"],
                   meta.get("sublinear_tf", True))
        for lang, terms in meta["vocabularies"].items():
            vec = _vectorizer(self.min_df, self.max_df, self.sublinear_tf)
            vec.vocabulary_ = {t: i for i, t in enumerate(terms)}
            vec.idf_ = load_npy(path / f"idf-{lang}.npy")
            self.vectorizers_[lang] = vec
        return self
