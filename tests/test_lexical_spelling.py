"""The lexical matcher's ``prefer_exact`` (issue 66): "Schäden" stems as "Schaden",
"schade" and "Schade" do (``schad``); by default a text on Schäden finds all three, with
the option only the heading its words spell."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagalign.records import Record
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.sources.base import Batch, FitContext
from tagalign.suggest.sources.lexical import LabelMatcher
from tagalign.suggest.sources.spelling import spelling
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary

#: the GND's headings of the demo's precision bug, and one a stem alone finds
VOCAB = Vocabulary([
    Subject("4125902-6", {"de": "Schaden", "en": "Damage"}),
    Subject("4374372-9", {"de": "schade"}),
    Subject("1148562222", {"de": "Schade"}),
    Subject("4046076-9", {"de": "Pilze"}),
])


def found(m: LabelMatcher, text: str, lang: str = "de") -> dict[str, float]:
    """Subject id → lex_ambiguity of each match in ``text``."""
    an = Analyzer()
    rec = Record(id="r", title=text, language=lang)
    batch = Batch([rec], [lang], [an.tokens(rec.text, lang)], [an.tokens(rec.title, lang)])
    c = m.candidates(batch)
    return {VOCAB.subjects[int(col)].id: float(f[5])
            for col, f in zip(c.cols, c.feats, strict=True)}


def fitted(prefer_exact: bool) -> LabelMatcher:
    m = LabelMatcher(prefer_exact=prefer_exact)
    m.fit(FitContext(VOCAB, Analyzer()))
    return m


def test_the_stemmer_conflates_them():
    an = Analyzer()
    assert set(an.stem(["schäden", "schaden", "schade", "schadens"], "de")) == {"schad"}
    assert spelling(["schäden", "größe"]) == "schaden grosse"


def test_by_default_a_text_on_schaeden_finds_all_three():
    got = found(fitted(False), "Schäden durch Pilze an Fachwerkgebäuden")
    assert got == {"4125902-6": 3.0, "4374372-9": 3.0, "1148562222": 3.0, "4046076-9": 1.0}


def test_prefer_exact_finds_the_heading_the_words_spell():
    m = fitted(True)
    assert found(m, "Schäden durch Pilze an Fachwerkgebäuden") == {
        "4125902-6": 1.0, "4046076-9": 1.0}  # one subject left: lex_ambiguity 1
    assert found(m, "Der Schaden") == {"4125902-6": 1.0}
    assert found(m, "Wie schade!") == {"4374372-9": 2.0, "1148562222": 2.0}  # case aside
    # a word spelling none of the labels is matched by the stem as before
    assert found(m, "Ursachen des Schadens") == {"4125902-6": 3.0, "4374372-9": 3.0,
                                                 "1148562222": 3.0}


def test_without_records_in_the_batch_the_stem_decides():
    m, an = fitted(True), Analyzer()
    toks = an.tokens("Schäden", "de")
    got = m.candidates(Batch([], ["de"], [toks], [toks]))
    assert len(got.cols) == 3


def test_the_option_is_a_hybrid_parameter_saved_with_the_model(tmp_path: Path):
    config = HybridConfig.from_params({"lexical_prefer_exact": True})
    assert config.lexical.prefer_exact
    assert not HybridConfig.from_params({}).lexical.prefer_exact  # default unchanged
    m = fitted(True)
    m.save(tmp_path)
    loaded = LabelMatcher(prefer_exact=False)  # the trained matching, whatever is asked
    loaded.load_state(tmp_path, FitContext(VOCAB, Analyzer()))
    assert loaded.config.prefer_exact
    assert found(loaded, "Schäden") == {"4125902-6": 1.0}


@pytest.mark.parametrize("prefer_exact", [False, True])
def test_a_key_of_one_spelling_is_untouched(prefer_exact: bool):
    assert found(fitted(prefer_exact), "Pilze und Pilz") == {"4046076-9": 1.0}
