"""The TF-IDF featurizer's own transform equals scikit-learn's on the same vectorizer."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tagalign.text.tfidf import TfidfFeaturizer

WORDS = [f"w{i}" for i in range(40)]
doc = st.lists(st.sampled_from([*WORDS, "unseen", "other"]), max_size=30)


def fitted(sublinear: bool) -> TfidfFeaturizer:
    rng = np.random.default_rng(0)
    docs = [list(rng.choice(WORDS, size=rng.integers(1, 25))) for _ in range(60)]
    return TfidfFeaturizer(("de", "en"), min_df=2, max_df=0.9, sublinear_tf=sublinear).fit(
        docs, ["de"] * 30 + ["en"] * 30)


FEATURIZERS = {s: fitted(s) for s in (True, False)}


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(docs=st.lists(doc, min_size=1, max_size=6), sublinear=st.booleans())
def test_transform_equals_sklearn(docs: list[list[str]], sublinear: bool) -> None:
    feat = FEATURIZERS[sublinear]
    langs = ["de" if i % 2 else "en" for i in range(len(docs))]
    out = feat.transform(docs, langs)
    for lang, (idx, X) in out.items():
        ref = feat.vectorizers_[lang].transform([docs[i] for i in idx]).tocsr()
        assert X.shape == ref.shape and X.dtype == np.float32
        assert np.array_equal(X.indptr, ref.indptr) and np.array_equal(X.indices, ref.indices)
        np.testing.assert_allclose(X.data, ref.data, rtol=2e-7, atol=1e-8)
    assert sum(len(idx) for idx, _ in out.values()) == len(docs)


def test_empty_and_unknown_rows_are_zero() -> None:
    feat = FEATURIZERS[True]
    (idx, X), = feat.transform([[], ["unseen"], ["w1", "w1", "w2"]], ["de"] * 3).values()
    assert list(idx) == [0, 1, 2]
    assert X[0].nnz == 0 and X[1].nnz == 0
    np.testing.assert_allclose(np.linalg.norm(X[2].toarray()), 1.0, rtol=1e-6)
