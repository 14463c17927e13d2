"""MARC language codes (ISO 639-2, bibliographic and terminology forms) → ISO 639-1.

MARC writes a record's language as three letters (041 $a, 008/35-37); the recipes and the
language detector speak two. No installed library carries the table (pycountry and
langcodes are not dependencies), so the codes of the languages a library catalogue is
likely to hold are listed here; any other code is kept as it is, and the recipes treat an
unknown code as no code (they detect the language, `tagalign.records.check_record`).
"""

from __future__ import annotations

#: ISO 639-2/B and /T codes with an ISO 639-1 equivalent
TO_639_1: dict[str, str] = {
    "afr": "af", "alb": "sq", "sqi": "sq", "ara": "ar", "arm": "hy", "hye": "hy",
    "baq": "eu", "eus": "eu", "bel": "be", "ben": "bn", "bos": "bs", "bul": "bg",
    "cat": "ca", "chi": "zh", "zho": "zh", "cze": "cs", "ces": "cs", "dan": "da",
    "dut": "nl", "nld": "nl", "eng": "en", "epo": "eo", "est": "et", "fin": "fi",
    "fre": "fr", "fra": "fr", "geo": "ka", "kat": "ka", "ger": "de", "deu": "de",
    "gle": "ga", "glg": "gl", "gre": "el", "ell": "el", "heb": "he", "hin": "hi",
    "hrv": "hr", "hun": "hu", "ice": "is", "isl": "is", "ind": "id", "ita": "it",
    "jpn": "ja", "kor": "ko", "lat": "la", "lav": "lv", "lit": "lt", "ltz": "lb",
    "mac": "mk", "mkd": "mk", "may": "ms", "msa": "ms", "mlt": "mt", "nor": "no",
    "nob": "nb", "nno": "nn", "per": "fa", "fas": "fa", "pol": "pl", "por": "pt",
    "roh": "rm", "rum": "ro", "ron": "ro", "rus": "ru", "slo": "sk", "slk": "sk",
    "slv": "sl", "spa": "es", "srp": "sr", "swe": "sv", "tur": "tr", "ukr": "uk",
    "urd": "ur", "vie": "vi", "wel": "cy", "cym": "cy", "yid": "yi",
}
#: codes that name no single language: undetermined, multiple, no linguistic content, and
#: the fill characters of an uncoded 008 — the record is treated as having no code
NO_LANGUAGE = frozenset({"und", "mul", "zxx", "mis", "xxx", "|||", "   ", "", "n/a"})


def marc_language(code: str | None) -> str | None:
    """``ger`` → ``de``; a code without a two-letter form is kept (lower-cased); None for
    none, blanks and `NO_LANGUAGE`."""
    if code is None:
        return None
    code = code.strip().lower()
    if code in NO_LANGUAGE or not code.isalpha():
        return None
    return TO_639_1.get(code, code)


#: ISO 639-1 → the MARC code (639-2/B, the form MARC uses)
FROM_639_1: dict[str, str] = {}
for _code, _short in TO_639_1.items():
    FROM_639_1.setdefault(_short, _code)  # the /B form comes first in the table


def marc_code(language: str | None) -> str:
    """``de`` → ``ger``; ``und`` for none; another code is written as it is (3 wide)."""
    if not language:
        return "und"
    return FROM_639_1.get(language, language)[:3].ljust(3)
