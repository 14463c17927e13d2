"""Looser label matches for the lexical matcher (issue 66): a label's words scattered in
the text, and a German compound label made of two words the text holds.

The matcher's table finds a label where its stemmed words stand together and in order
("Geschichte der Philosophie"). Headings no training record carries are reached only by
reading their labels, and on dev 42 % of those have every label stem in the text but not
always side by side; an English text says "storage of energy" where the label says
"Energy storage", and a German one "die Speicherung von Energie" where the heading is
`Energiespeicherung`. Both indexes here are derived from the matcher's table (and, for the
compounds, the vocabulary's German labels), so they follow its keys: a new heading of a
change file gets them, a key left out as too ambiguous has none.

- *scattered*: a key of 2 or more stems is found when every stem is among the text's
  tokens; ``lex_pref`` `NEAR` when they lie within a window of the key's length + 2
  tokens, `SCATTERED` further apart.
- *compounds*: a one-word German label is split into two words of the vocabulary's German
  labels (a joint ``s``/``es``/``n``/``en``/``e`` allowed: ``Energie|speicher|ung``,
  ``Arbeit|s|markt``); the label is found (``lex_pref`` `COMPOUND`) in a German text that
  holds both parts' stems. The other way round (a text's compound naming a label's part)
  was measured too and left out: 37 candidates a record at a precision of 0.002.

Written here rather than taken from PyPI's splitters (`compound-split`/CharSplit scores a
split point by a general corpus's n-grams; the dictionary-based ones need word lists we
cannot ship): a split is of use only if both parts are words a text can hold, and the
GND's own labels are that dictionary, so the split is checked against them alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from tagalign.text import Analyzer

#: ``lex_pref`` of the looser matches (1 preferred label, 0 alternative, -1 German label
#: in an English text, -2 mined variant)
COMPOUND = -3
NEAR = -4
SCATTERED = -5
#: the words of a compound split: parts of at least this many letters
MIN_PART = 4
#: a word shorter than this is not split
MIN_COMPOUND = 8
#: joints between a compound's parts (Fugenelemente), the empty one first
JOINTS = ("", "s", "es", "n", "en", "e")
#: scattered stems count as `NEAR` within a window of the key's length + this
NEAR_SLACK = 2

#: stem → the keys (stem sets) anchored at it
ScatteredIndex = dict[str, list[tuple[frozenset[str], str]]]
#: head stem → (modifier stem, the compound's key)
CompoundIndex = dict[str, list[tuple[str, str]]]


def scattered_index(grams: Iterable[str]) -> ScatteredIndex:
    """The keys of 2 or more distinct stems, each under its stem that the fewest keys
    hold, so a text's stems look through few keys (about 300 a dev record)."""
    keys = [(frozenset(gram.split(" ")), gram) for gram in grams]
    keys = [(stems, gram) for stems, gram in keys if len(stems) >= 2]
    df: Counter[str] = Counter(s for stems, _ in keys for s in stems)
    index: ScatteredIndex = defaultdict(list)
    for stems, gram in keys:
        index[min(stems, key=lambda s: (df[s], s))].append((stems, gram))
    return dict(index)


def split_compound(word: str, lexicon: set[str]) -> list[tuple[str, str]]:
    """The ways ``word`` is two words of ``lexicon`` (a joint between them allowed)."""
    out = []
    for i in range(MIN_PART, len(word) - MIN_PART + 1):
        head, mod = word[i:], word[:i]
        if head not in lexicon:
            continue
        for joint in JOINTS:
            if joint and not mod.endswith(joint):
                continue
            stem = mod[:len(mod) - len(joint)]
            if len(stem) >= MIN_PART - 1 and (stem in lexicon or stem + "e" in lexicon):
                out.append((stem if stem in lexicon else stem + "e", head))
                break
    return out


def compound_index(labels: Iterable[str], grams: set[str], analyzer: Analyzer
                   ) -> CompoundIndex:
    """The German one-word ``labels`` that split into two label words, under their head's
    stem, for those whose key is among ``grams`` (the table's German keys)."""
    worded = [analyzer.words(label) for label in labels]
    lexicon = {w for words in worded for w in words if len(w) >= MIN_PART}
    index: CompoundIndex = defaultdict(list)
    for words in worded:
        if len(words) != 1 or len(words[0]) < MIN_COMPOUND:
            continue
        key = analyzer.stem(words, "de")[0]
        if key not in grams:
            continue
        for mod, head in split_compound(words[0], lexicon):
            smod, shead = analyzer.stem([mod, head], "de")
            if smod != shead and (smod, key) not in index[shead]:
                index[shead].append((smod, key))
    return dict(index)


def window(stems: frozenset[str], positions: dict[str, list[int]]) -> int:
    """The narrowest window of the text's tokens that holds every stem of ``stems``
    (a sweep over their merged positions)."""
    marks = sorted((p, s) for s in stems for p in positions[s])
    need, have, best, left = len(stems), defaultdict[str, int](int), 10**9, 0
    covered = 0
    for p, s in marks:
        have[s] += 1
        covered += have[s] == 1
        while covered == need:
            best = min(best, p - marks[left][0] + 1)
            ls = marks[left][1]
            have[ls] -= 1
            covered -= have[ls] == 0
            left += 1
    return best
