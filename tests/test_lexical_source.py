"""The lexical source's scan (issue 23 made it grow n-grams token by token): matches,
their features and the stop at grams that begin no label, on a worked example."""

from __future__ import annotations

import json

import numpy as np

from tagalign.io import write_json_atomic
from tagalign.records import Record
from tagalign.suggest.sources.base import Batch, FitContext
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.suggest.sources.memory import RecordMemory
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
    m.fit(FitContext(vocab, an))
    return m, an


def test_matches_and_features_of_a_worked_example():
    m, an = matcher()
    rec = Record(id="r", title="Geschichte der Philosophie",
                 abstract="Über Philosophie und neue Medien in der Geschichte.", language="de")
    toks, ttoks = an.tokens(rec.text, "de"), an.tokens(rec.title, "de")
    batch = Batch([rec], ["de"], [toks], [ttoks])
    c = m.candidates(batch)
    assert np.isnan(c.feats[:, 6]).all()  # lex_prec: no training counts without records
    feats = {int(col): f[:6].tolist() for col, f in zip(c.cols, c.feats, strict=True)}
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


def test_lex_prec_counts_found_and_gold_training_texts(tmp_path):
    """Fitting on records counts, per subject, the texts where a label is found and those
    where it is also gold: lex_prec = (gold + 1) / (found + 2), NaN if never found."""
    import scipy.sparse as sp

    _, an = matcher()
    vocab = Vocabulary([Subject("s0", {"de": "Geschichte"}), Subject("s1", {"de": "Epos"}),
                        Subject("s2", {"de": "Halbleiter"})])
    texts = ["Geschichte des Epos", "Geschichte der Stadt", "Zur Geschichte", "Ein Epos"]
    gold = [[0, 1], [], [], [1]]
    recs = [Record(id=str(i), title=t, language="de") for i, t in enumerate(texts)]
    Y = sp.csr_matrix(([1.0] * 3, ([0, 0, 3], [0, 1, 1])), shape=(4, 3))
    assert [sorted(Y[i].indices.tolist()) for i in range(4)] == gold
    m = LabelMatcher()
    m.fit(FitContext(vocab, an, RecordMemory.from_records(recs, vocab, ["de"] * 4),
                     records=recs, Y=Y, tokens=[an.tokens(t, "de") for t in texts]))
    assert m.found_.tolist() == [3.0, 2.0, 0.0] and m.gold_.tolist() == [1.0, 2.0, 0.0]
    # scanned a record at a time (chunks bound the scan's memory): the same counts, and
    # the progress of the scan a chunk at a time (issue 63)
    events: list[tuple[str, int, int]] = []
    m._count_found(Batch(recs, ["de"] * 4, [an.tokens(t, "de") for t in texts], [[]] * 4),
                   Y, 3, chunk=1, progress=lambda *e: events.append(e))
    assert m.found_.tolist() == [3.0, 2.0, 0.0] and m.gold_.tolist() == [1.0, 2.0, 0.0]
    assert events == [("lexical: label counts", k, 4) for k in range(5)]
    rec = Record(id="q", title="Epos und Geschichte", language="de")
    c = m.candidates(Batch([rec], ["de"], [an.tokens(rec.title, "de")],
                           [an.tokens(rec.title, "de")]))
    prec = dict(zip(c.cols.tolist(), c.feats[:, 6].tolist(), strict=True))
    assert prec == {0: np.float32(2 / 5), 1: np.float32(3 / 4)}
    # counted over a seeded sample (count_max_records): exactly the sampled records' counts
    from tagalign.sampling import sample_indices

    ctx = FitContext(vocab, an, RecordMemory.from_records(recs, vocab, ["de"] * 4),
                     records=recs, Y=Y, tokens=[an.tokens(t, "de") for t in texts])
    for seed in range(6):
        capped = LabelMatcher(count_max_records=2, seed=seed)
        capped.fit(ctx)
        keep = sample_indices(4, 2, seed).tolist()
        sub = LabelMatcher()
        sub._grams, sub._prefixes = m._grams, m._prefixes
        sub._count_found(Batch([recs[i] for i in keep], ["de"] * 2,
                               [an.tokens(texts[i], "de") for i in keep], [[]] * 2),
                         Y[keep], 3)
        assert capped.found_.tolist() == sub.found_.tolist()
        assert capped.gold_.tolist() == sub.gold_.tolist()
        assert capped.found_.sum() < m.found_.sum()  # two of the four texts
    whole = LabelMatcher(count_max_records=4)  # a cap of all: every record counted
    whole.fit(ctx)
    assert whole.found_.tolist() == [3.0, 2.0, 0.0] and whole.gold_.tolist() == [1.0, 2.0, 0.0]
    m.save(tmp_path)
    loaded = LabelMatcher()
    loaded.load_state(tmp_path, FitContext(vocab, an))
    assert np.array_equal(loaded._prec, m._prec, equal_nan=True)
    # a matcher fitted on the vocabulary alone (the lexical recipe's) has no counts
    alone = LabelMatcher()
    alone.fit(FitContext(vocab, an))
    alone.save(tmp_path / "alone")
    assert not (tmp_path / "alone/found.npy").exists()
    again = LabelMatcher()
    again.load_state(tmp_path / "alone", FitContext(vocab, an))
    assert again._prec is None


def test_german_labels_are_looked_for_in_english_texts_only_without_an_english_label():
    """`lexical_cross_language` (the hybrid's default since issue 33): a subject with no
    English label is found in an English text by its German labels; one with an English
    label only by that."""
    vocab = Vocabulary([
        Subject("s0", {"de": "Geschichte"}),
        Subject("s2", {"de": "Philosophie", "en": "philosophy"}),
        Subject("s3", {"de": "Neue Medien"}, {"de": ["Digitale Medien"]}),
    ])
    an = Analyzer()
    rec = Record(id="e", title="Neue Medien and digitale Medien in Geschichte",
                 abstract="On Philosophy, not Philosophen.", language="en")
    batch = Batch([rec], ["en"], [an.tokens(rec.text, "en")], [an.tokens(rec.title, "en")])
    found = {}
    for cross in (False, True):
        m = LabelMatcher(cross_language=cross)
        m.fit(FitContext(vocab, an))
        c = m.candidates(batch)
        found[cross] = {vocab.subjects[int(col)].id: f[0] for col, f in
                        zip(c.cols, c.feats, strict=True)}
    assert found[False] == {"s2": 1.0}  # by its English label
    assert found[True] == {"s0": 1.0, "s2": 1.0, "s3": 2.0}  # + "neue medien", the alt label
    # the hybrid's default turns it on, and so does the source's own (the same default)
    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import HybridConfig
    assert HybridConfig.from_params(HybridRecipe.defaults).lexical.cross_language
    assert LabelMatcher().config.cross_language


def test_the_table_saves_compact_and_an_indented_one_still_loads(tmp_path):
    """The table is written as compact JSON (orjson); a model saved before, indented by
    the json module, loads to the same table."""
    m, an = matcher()
    (tmp_path / "new").mkdir()
    (tmp_path / "old").mkdir()
    m.save(tmp_path / "new")
    saved = (tmp_path / "new/lexical.json").read_bytes()
    assert b"\n" not in saved and json.loads(saved)["table"] == {
        k: [list(hit) for hit in v] for k, v in m.table_.items()}
    write_json_atomic(tmp_path / "old/lexical.json", json.loads(saved))  # as saved before
    assert b"\n  " in (tmp_path / "old/lexical.json").read_bytes()
    for where in ("new", "old"):
        back = LabelMatcher()
        back.load_state(tmp_path / where, FitContext(m.vocab_, an))
        assert back.table_ == m.table_ and back._grams == m._grams
        assert back.config.max_ngram == 5 and back._prec is None


def test_labels_naming_too_many_subjects_are_not_looked_for(tmp_path):
    """`max_key_subjects`: a label that names more subjects than the cap (here three works
    called "Gedichte", by their alternative label) gives no candidate; a longer label that
    begins with it still matches, and a cap of three or None keeps it. The cap is saved:
    a table saved without it (made before the cap) loads as uncapped."""
    vocab = Vocabulary([
        *(Subject(f"w{i}", {"de": f"Autor{i}, Anna / Gedichte"}, {"de": ["Gedichte"]})
          for i in range(3)),
        Subject("s3", {"de": "Gedichte der Romantik"}),
        Subject("s4", {"de": "Lyrik"}),
    ])
    an = Analyzer()
    rec = Record(id="r", title="Gedichte der Romantik", abstract="Lyrik und Gedichte.",
                 language="de")
    batch = Batch([rec], ["de"], [an.tokens(rec.text, "de")], [an.tokens(rec.title, "de")])
    found = {}
    for cap in (2, 3, None):
        m = LabelMatcher(max_key_subjects=cap)
        m.fit(FitContext(vocab, an))
        found[cap] = sorted(m.candidates(batch).cols.tolist())
    assert found[2] == [3, 4]
    assert found[3] == found[None] == [0, 1, 2, 3, 4]
    assert LabelMatcher().config.max_key_subjects == 200
    m = LabelMatcher(max_key_subjects=2)
    m.fit(FitContext(vocab, an))
    m.save(tmp_path)
    back = LabelMatcher()
    back.load_state(tmp_path, FitContext(vocab, an))
    assert back.config.max_key_subjects == 2 and back.table_ == m.table_
    data = json.loads((tmp_path / "lexical.json").read_text())
    del data["max_key_subjects"]
    write_json_atomic(tmp_path / "lexical.json", data)
    back.load_state(tmp_path, FitContext(vocab, an))
    assert back.config.max_key_subjects is None
