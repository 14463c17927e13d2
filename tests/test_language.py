"""Language identification (simplemma) and `tagalign detect-language`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.text.language import (
    UnsupportedLanguageError,
    best_language,
    detect_language,
)

runner = CliRunner()


def test_detect_language_ranks_candidates_and_unknown():
    assert detect_language("Schäden durch Pilze an Fachwerkgebäuden", ["de", "en"])[0] == (
        "de", 1.0)
    assert detect_language("Investigation of the seismic behaviour", ["de", "en"])[0] == (
        "en", 1.0)
    assert detect_language("", ["de", "en"]) == [(None, 1.0)]
    assert best_language("Theorie und Praxis der Denkmalpflege") == "de"
    assert best_language("12345 ---") is None
    # a tie goes to the candidate listed first, as in Annif
    assert [x[0] for x in detect_language("The quick brown fox", ["en", "de"])] == [
        "en", "de", None]


@pytest.mark.parametrize("languages", [[], ["de", "en", "fr", "it", "es", "nl"]])
def test_candidate_count_is_checked(languages):
    with pytest.raises(ValueError, match="1 to 5"):
        detect_language("x", languages)


def test_unknown_candidate_is_named():
    with pytest.raises(UnsupportedLanguageError, match="xx"):
        detect_language("x", ["de", "xx"])


def test_cli():
    res = runner.invoke(app, ["detect-language", "Holzschutz im Fachwerkbau", "-l", "de,en"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "de\t1.0000"
    res = runner.invoke(app, ["detect-language", "-", "--json"],
                        input="The quick brown fox jumped over the lazy dog")
    assert json.loads(res.stdout)["results"][0] == {"language": "en", "score": 1.0}
    res = runner.invoke(app, ["detect-language", "x", "-l", "de,xx"])
    assert res.exit_code == 1 and "unsupported candidate languages: xx" in res.output
