"""Exact spellings on a shared stem: the lexical matcher's ``prefer_exact`` (issue 66).

The German Snowball stemmer strips the endings -e, -en, -er, -ern, -s and folds ä, ö, ü
into a, o, u, so "Schäden", "Schaden", "schade" and "Schade" all stem to ``schad``: the
GND's `Schaden` (4125902-6), its word heading `schade` (4374372-9) and `Schade`
(1148562222) share one key of the matcher's table, and a text on "Schäden" found all three.
The conflation is usually right (Häuser and Haus, Kinder and Kind: one key, one heading),
so it stays the default; with ``prefer_exact`` a key whose subjects are spelt differently
is told apart by the text's words: words that spell one of the labels exactly (case and
umlauts aside, so "Schäden" spells "Schaden") match only that label's subjects; words that
spell none of them ("Schadens") still match all, as without the option.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

#: umlauts and ß as the German stemmer folds them
_FOLD = str.maketrans({"ä": "a", "ö": "o", "ü": "u", "ß": "ss"})

Hits = list[tuple[int, int]]
#: per language: key (stemmed label) → spelling → the key's hits of that spelling
Spellings = dict[str, dict[str, dict[str, Hits]]]


def spelling(words: Iterable[str]) -> str:
    """Lowercase words (`tagalign.text.Analyzer.words`) joined, umlauts and ß folded."""
    return " ".join(words).translate(_FOLD)


def spelling_index(table: dict[str, Hits], forms: Callable[[int], Iterable[tuple[str, str]]],
                   unspelt: int) -> Spellings:
    """The keys of ``table`` (``lang|gram`` → hits) that name subjects of different
    spellings. ``forms(pos)``: (key, spelling) of each label of subject ``pos``; a hit of
    kind ``unspelt`` (a mined variant: no label spells it) is kept under every spelling."""
    shared = {key: hits for key, hits in table.items() if len({p for p, _ in hits}) > 1}
    spelt: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for pos in {p for hits in shared.values() for p, _ in hits}:
        for key, spelt_as in forms(pos):
            if key in shared:
                spelt[pos][key].add(spelt_as)
    out: Spellings = {}
    for key, hits in shared.items():
        by_spelling: dict[str, Hits] = defaultdict(list)
        for hit in hits:
            for spelt_as in spelt[hit[0]].get(key, ()):
                by_spelling[spelt_as].append(hit)
        if len(by_spelling) < 2:
            continue  # one spelling: nothing to tell apart
        anyhow = [h for h in hits if h[1] == unspelt]
        lang, gram = key.split("|", 1)
        out.setdefault(lang, {})[gram] = {s: [*h, *anyhow] for s, h in by_spelling.items()}
    return out
