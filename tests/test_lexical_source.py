"""The lexical source's scan (issue 23 made it grow n-grams token by token): matches,
their features and the stop at grams that begin no label, on a worked example."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from tagalign.records import Record
from tagalign.suggest.sources.base import Batch
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary


def matcher() -> tuple[LabelMatcher, Analyzer]:
    vocab = Vocabulary([
        Subject("s0", {"de": "Geschichte"}),
        Subject("s1", {"de": "Geschichte der Philosophie"}, {"de": ["Philosophiegeschichte"]}),
        Subject("s2", {"de": "Philosophie", "en": "philosophy"}),
        Subject("s3", {"de": "Neue Medien"}),
    ])
    an = Analyzer()
    m = LabelMatcher(max_ngram=5)
    m.fit(SimpleNamespace(analyzer=an, vocab=vocab))
    return m, an


def test_matches_and_features_of_a_worked_example():
    m, an = matcher()
    rec = Record(id="r", title="Geschichte der Philosophie",
                 abstract="Über Philosophie und neue Medien in der Geschichte.", language="de")
    toks, ttoks = an.tokens(rec.text, "de"), an.tokens(rec.title, "de")
    batch = Batch([rec], ["de"], [toks], [ttoks])
    c = m.candidates(batch)
    feats = {int(col): f.tolist() for col, f in zip(c.cols, c.feats, strict=True)}
    n = len(toks)
    # lex_count, lex_in_title, lex_ntokens, lex_first, lex_pref, lex_ambiguity
    assert feats[0] == [2.0, 1.0, 1.0, 0.0, 1.0, 1.0]  # "Geschichte" twice, first token
    assert feats[1] == [1.0, 1.0, 2.0, 0.0, 1.0, 1.0]  # the two-word label, grown past a hit
    assert feats[2] == [2.0, 1.0, 1.0, np.float32(1 / n), 1.0, 1.0]  # after a stop word, twice
    assert feats[3] == [1.0, 0.0, 2.0, feats[3][3], 1.0, 1.0] and feats[3][3] > 0
    assert batch.evidence["lexical"][0][1] == " ".join(an.stem(["geschichte", "philosophie"],
                                                               "de"))


def test_english_and_unknown_languages():
    m, an = matcher()
    recs = [Record(id="e", title="Philosophy", language="en"),
            Record(id="x", title="Philosophie", language="fr")]  # other languages scan as de
    batch = Batch(recs, ["en", "fr"], [an.tokens(r.text, r.language) for r in recs],
                  [an.tokens(r.title, r.language) for r in recs])
    c = m.candidates(batch)
    assert list(zip(c.rows.tolist(), c.cols.tolist(), strict=True)) == [(0, 2), (1, 2)]
