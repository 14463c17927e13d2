"""English label variants mined from training records (issue 33): support, smoothed
precision and the per-subject cap on a worked example, and the lexical source finding a
subject without an English label by a mined phrase."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tagalign.records import Record
from tagalign.suggest.sources.base import Batch, FitContext
from tagalign.suggest.sources.lexical import MINED, LabelMatcher
from tagalign.suggest.sources.memory import RecordMemory
from tagalign.suggest.sources.mined import mine_label_variants, record_grams
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary

TEXTS = ["Timber frame houses damaged by fungi", "Fungi in timber frame buildings",
         "Repairing timber frame walls", "Timber frame churches", "Fungi in cellars",
         "History of the city"]
GOLD = [[0], [0], [0], [1], [], [1]]  # s0 Fachwerkbau (no English label), s1 Geschichte


def data() -> tuple[Analyzer, Vocabulary, list[list[str]], sp.csr_matrix]:
    an = Analyzer()
    vocab = Vocabulary([Subject("s0", {"de": "Fachwerkbau"}),
                        Subject("s1", {"de": "Geschichte", "en": "history"})])
    rows = [r for r, g in enumerate(GOLD) for _ in g]
    Y = sp.csr_matrix((np.ones(len(rows)), (rows, [s for g in GOLD for s in g])),
                      shape=(len(TEXTS), 2))
    return an, vocab, [an.tokens(t, "en") for t in TEXTS], Y


def test_record_grams():
    assert record_grams(["a", "b", "c"], 2) == {"a", "b", "c", "a b", "b c"}


def test_mined_phrases_have_support_and_precision():
    _, _, tokens, Y = data()
    mined = mine_label_variants(tokens, Y, min_support=3, min_precision=0.5)
    # "timber frame" is in 4 texts, 3 of them s0's: 3 / (4 + 1) = 0.6; "fungi" is in 3
    # texts, 2 of them s0's: below the support; s1 has 2 records: nothing
    assert mined == {"timber": [(0, 0.6)], "frame": [(0, 0.6)], "timber frame": [(0, 0.6)]}
    assert mine_label_variants(tokens, Y, min_support=3, min_precision=0.7) == {}
    assert len(mine_label_variants(tokens, Y, min_support=3, min_precision=0.5,
                                   max_per_subject=1)) == 1
    # only subjects the mask names
    assert mine_label_variants(tokens, Y, subjects=np.array([False, True])) == {}


def test_lexical_source_finds_a_subject_by_a_mined_phrase():
    an, vocab, tokens, Y = data()
    recs = [Record(id=str(i), title=t, language="en") for i, t in enumerate(TEXTS)]
    ctx = FitContext(vocab, an, RecordMemory.from_records(recs, vocab, ["en"] * len(recs)),
                     records=recs, Y=Y, tokens=tokens)
    plain, mining = LabelMatcher(), LabelMatcher(mine_min_support=3)
    plain.fit(ctx)
    mining.fit(ctx)
    rec = Record(id="q", title="Timber frame barns", language="en")
    batch = Batch([rec], ["en"], [an.tokens(rec.title, "en")], [an.tokens(rec.title, "en")])
    assert len(plain.candidates(batch).cols) == 0
    c = mining.candidates(batch)
    assert c.cols.tolist() == [0]
    f = dict(zip(c.names, c.feats[0].tolist(), strict=True))
    assert f["lex_pref"] == MINED and f["lex_count"] == 3.0  # timber, timber frame, frame
    # found in 4 training texts, gold in 3: lex_prec (3 + 1) / (4 + 2)
    assert np.isclose(f["lex_prec"], 4 / 6)
