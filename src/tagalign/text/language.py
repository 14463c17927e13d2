"""Language identification among candidate languages (Annif's `/detect-language`).

simplemma's `LanguageDetector` — the library Annif itself uses for this endpoint — gives
each candidate the share of the text's words it recognises as that language (dictionary
lookup after lemmatisation, so it works on a title of three words), plus ``unk`` for the
rest. `tagalign.text.guess_language` (records without a language code) uses it, with
the old stop-word count breaking ties; `benchmarks/quality/language_id.py` compares them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache

from tagalign.errors import InputError

MAX_CANDIDATES = 5  # Annif's OpenAPI document allows at most 5 candidate languages
#: characters of a text looked at: simplemma samples the text's most common words, which a
#: few pages already settle; reading 20 MB would take the CPU for a minute
MAX_TEXT = 100_000
_LOAD_LOCK = threading.Lock()  # taken only to build a detector (loads its dictionaries)


class UnsupportedLanguageError(InputError):
    """A candidate language simplemma has no dictionary for."""


def supported_languages() -> frozenset[str]:
    from simplemma.strategies.dictionaries.dictionary_factory import SUPPORTED_LANGUAGES

    return frozenset(SUPPORTED_LANGUAGES)


@lru_cache(maxsize=16)
def _build_detector(languages: tuple[str, ...]):
    from simplemma import LanguageDetector
    from simplemma.strategies.dictionaries.dictionary_factory import (
        DEFAULT_DICTIONARY_FACTORY,
    )

    for lang in languages:  # load each dictionary once, not once per concurrent caller
        DEFAULT_DICTIONARY_FACTORY.get_dictionary(lang)
    return LanguageDetector(languages)


def _detector(languages: tuple[str, ...]):
    """The detector for ``languages``. Detection itself needs no lock: its only shared
    state is simplemma's ``lru_cache``s, which are thread-safe; the lock only keeps two
    first requests from loading the same dictionaries twice."""
    with _LOAD_LOCK:
        return _build_detector(languages)


def _head(text: str, limit: int = MAX_TEXT) -> str:
    """The first ``limit`` characters of ``text``, cut at a space so no word is halved."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", limit // 2, limit)
    return text[:cut if cut > 0 else limit]


def detect_language(text: str, languages: Sequence[str]) -> list[tuple[str | None, float]]:
    """``[(language or None for unknown, score), …]``, best first, from the first
    `MAX_TEXT` characters of ``text``.

    Raises `UnsupportedLanguageError` naming the candidates simplemma does not know, and
    `ValueError` for no candidates or more than `MAX_CANDIDATES`.
    """
    langs = tuple(dict.fromkeys(lang.lower() for lang in languages))
    if not langs or len(langs) > MAX_CANDIDATES:
        raise InputError(f"give 1 to {MAX_CANDIDATES} candidate languages, not {len(langs)}")
    unknown = [lang for lang in langs if lang not in supported_languages()]
    if unknown:
        raise UnsupportedLanguageError(f"unsupported candidate languages: {', '.join(unknown)}"
                                       f" (supported: {', '.join(sorted(supported_languages()))})")
    shares = _detector(langs).proportion_in_each_language(_head(text))
    # ties keep the order the candidates were given in (as Annif's stable sort does)
    ranked = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0] == "unk"))
    return [(None if lang == "unk" else lang, round(float(score), 6)) for lang, score in ranked]


def best_language(text: str, languages: Sequence[str] = ("de", "en")) -> str | None:
    """The top candidate, or None when no word of the text is recognised."""
    lang, score = detect_language(text, languages)[0]
    return lang if score > 0 else None
