"""The lexical matcher's looser matches (issue 66): a label's words scattered in the text
(``scattered``) and a German compound label whose two parts the text holds
(``compounds``); both off by default, saved with the model, and new headings get them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagalign.records import Record
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.sources.base import Batch, FitContext, NewHeadings
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.suggest.sources.loose import (
    COMPOUND,
    NEAR,
    SCATTERED,
    split_compound,
    window,
)
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary

VOCAB = Vocabulary([
    Subject("4154163-7", {"de": "Fachwerkbau"}),
    Subject("4016415-9", {"de": "Fachwerk"}),
    Subject("4004615-1", {"de": "Bau"}),  # too short a part: not split off
    Subject("4152230-8", {"de": "Energiespeicherung", "en": "Energy storage"}),
    Subject("4014692-3", {"de": "Energie", "en": "Energy"}),
    Subject("4182589-5", {"de": "Speicherung", "en": "Storage"}),
    Subject("4020517-4", {"de": "Geschichte der Philosophie",
                          "en": "History of philosophy"}),
    Subject("4038971-6", {"de": "Arbeitsmarkt", "en": "Labour market"}),
    Subject("4002714-4", {"de": "Arbeit", "en": "Work"}),
    Subject("4037589-4", {"de": "Markt", "en": "Market"}),
])
ID = {s.id: i for i, s in enumerate(VOCAB.subjects)}
PREF = LabelMatcher.features.index("lex_pref")


def kinds(m: LabelMatcher, text: str, lang: str = "de") -> dict[str, int]:
    """Subject id → ``lex_pref`` of each match in ``text`` (a title)."""
    an = Analyzer()
    rec = Record(id="r", title=text, language=lang)
    batch = Batch([rec], [lang], [an.tokens(rec.text, lang)], [an.tokens(rec.title, lang)])
    c = m.candidates(batch)
    return {VOCAB.subjects[int(col)].id: int(f[PREF])
            for col, f in zip(c.cols, c.feats, strict=True)}


def fitted(vocab: Vocabulary = VOCAB, **options: object) -> LabelMatcher:
    m = LabelMatcher(**options)
    m.fit(FitContext(vocab, Analyzer()))
    return m


def test_split_compound_needs_two_label_words_and_allows_a_joint():
    lexicon = {"energie", "speicherung", "arbeit", "markt", "fachwerk", "bau"}
    assert split_compound("energiespeicherung", lexicon) == [("energie", "speicherung")]
    assert split_compound("arbeitsmarkt", lexicon) == [("arbeit", "markt")]
    assert split_compound("fachwerkbau", lexicon) == []  # "bau": under 4 letters
    assert split_compound("wasserspeicherung", lexicon) == []  # "wasser" no label word


def test_window_is_the_narrowest_span_holding_every_stem():
    pos = {"a": [0, 9], "b": [5, 10], "c": [11]}
    assert window(frozenset({"a", "b"}), pos) == 2  # 9..10
    assert window(frozenset({"a", "b", "c"}), pos) == 3  # 9..11
    assert window(frozenset({"a", "c"}), pos) == 3


def test_by_default_only_labels_standing_together_are_found():
    m = fitted()
    got = kinds(m, "Die Speicherung von Energie; die Philosophie und ihre Geschichte")
    assert "4152230-8" not in got and "4020517-4" not in got
    assert got["4014692-3"] == 1 and got["4182589-5"] == 1


def test_compounds_find_a_german_compound_from_its_parts():
    m = fitted(compounds=True)
    got = kinds(m, "Die Speicherung von Energie im Stromnetz")
    assert got["4152230-8"] == COMPOUND
    assert got["4014692-3"] == 1  # the parts are still found as themselves
    assert kinds(m, "Der Markt für Arbeit")["4038971-6"] == COMPOUND  # with a joint "s"
    assert "4038971-6" not in kinds(m, "Der Markt")
    # English texts: compounds are German only
    assert "4152230-8" not in kinds(m, "Storage of energy", "en")
    # found exactly, the label keeps its own kind
    assert kinds(m, "Energiespeicherung und Energie")["4152230-8"] == 1


def test_scattered_finds_a_label_in_any_order_near_or_far():
    m = fitted(scattered=True, scattered_slack=None)
    assert kinds(m, "Storage of energy", "en")["4152230-8"] == NEAR
    far = "Energy policies, their costs and the grid operators' interests in storage"
    assert kinds(m, far, "en")["4152230-8"] == SCATTERED
    assert kinds(m, "Energy storage", "en")["4152230-8"] == 1  # in order: exact
    got = kinds(m, "Die Philosophie und ihre Geschichte")
    assert got["4020517-4"] == NEAR
    assert "4020517-4" not in kinds(m, "Die Philosophie")  # every stem is needed


def test_scattered_slack_bounds_the_window():
    far = "Energy policies, their costs and the grid operators' interests in storage"
    assert "4152230-8" not in kinds(fitted(scattered=True), far, "en")  # 2 + 2 tokens
    between = "Storage in the grid: energy"  # stems storag grid energi: a window of 3
    assert kinds(fitted(scattered=True), between, "en")["4152230-8"] == NEAR
    assert kinds(fitted(scattered=True, scattered_slack=12), far, "en")["4152230-8"] == NEAR
    assert "4152230-8" not in kinds(fitted(scattered=True, scattered_slack=0), between, "en")
    m = fitted(scattered=True)
    m.set_matching(scattered_slack=None)
    assert kinds(m, far, "en")["4152230-8"] == SCATTERED


def test_scattered_match_features_say_where_and_how_long():
    m = fitted(scattered=True)
    an = Analyzer()
    rec = Record(id="r", title="Storage", abstract="Energy in the grid.", language="en")
    batch = Batch([rec], ["en"], [an.tokens(rec.text, "en")], [an.tokens(rec.title, "en")])
    c = m.candidates(batch)
    row = dict(zip(m.features, c.feats[list(c.cols).index(ID["4152230-8"])], strict=True))
    assert row["lex_ntokens"] == 2 and row["lex_in_title"] == 0 and row["lex_count"] == 1
    assert row["lex_pref"] == NEAR


def test_the_options_are_saved_and_a_new_heading_gets_them(tmp_path: Path):
    m = fitted(scattered=True, compounds=True)
    m.save(tmp_path)
    back = LabelMatcher()  # the defaults: off; the saved model's matching wins
    back.load_state(tmp_path, FitContext(VOCAB, Analyzer()))
    assert back.config.scattered and back.config.compounds
    assert kinds(back, "Die Speicherung von Energie")["4152230-8"] == COMPOUND
    assert back.config.scattered_slack == 2
    new = Vocabulary([*VOCAB.subjects, Subject("1047563150", {"de": "Stromspeicherung"}),
                      Subject("4183378-6", {"de": "Strom"})])
    back.take_headings(NewHeadings(added=[len(VOCAB), len(VOCAB) + 1], relabelled=[]),
                       FitContext(new, Analyzer()))
    an = Analyzer()
    rec = Record(id="r", title="Speicherung von Strom", language="de")
    c = back.candidates(Batch([rec], ["de"], [an.tokens(rec.text, "de")],
                              [an.tokens(rec.title, "de")]))
    assert int(c.feats[list(c.cols).index(len(VOCAB)), PREF]) == COMPOUND


def test_a_model_saved_before_the_options_matches_as_it_did(tmp_path: Path):
    m = fitted()
    m.save(tmp_path)
    raw = (tmp_path / "lexical.json").read_text()
    for key in ('"scattered":false,', '"compounds":false,'):
        assert key in raw
        raw = raw.replace(key, "")
    (tmp_path / "lexical.json").write_text(raw)
    back = LabelMatcher(scattered=True, compounds=True)
    back.load_state(tmp_path, FitContext(VOCAB, Analyzer()))
    assert not back.config.scattered and not back.config.compounds
    assert "4152230-8" not in kinds(back, "Die Speicherung von Energie")


def test_a_scattered_model_saved_before_the_window_matches_anywhere(tmp_path: Path):
    m = fitted(scattered=True, scattered_slack=None)
    m.save(tmp_path)
    raw = (tmp_path / "lexical.json").read_text()
    assert '"scattered_slack":null,' in raw
    (tmp_path / "lexical.json").write_text(raw.replace('"scattered_slack":null,', ""))
    back = LabelMatcher(scattered=True)  # the window of today's default: 2
    back.load_state(tmp_path, FitContext(VOCAB, Analyzer()))
    far = "Energy policies, their costs and the grid operators' interests in storage"
    assert back.config.scattered_slack is None
    assert kinds(back, far, "en")["4152230-8"] == SCATTERED


def test_set_matching_turns_them_on_in_a_trained_matcher_and_refuses_others():
    m = fitted()
    m.set_matching(compounds=True)
    assert kinds(m, "Die Speicherung von Energie")["4152230-8"] == COMPOUND
    with pytest.raises(ValueError, match="no option"):
        m.set_matching(stems=True)


def test_flat_names_reach_the_matcher():
    config = HybridConfig.from_params({"lexical_scattered": True, "lexical_compounds": True})
    assert config.lexical.scattered and config.lexical.compounds
