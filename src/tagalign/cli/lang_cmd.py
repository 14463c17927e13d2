"""`tagalign detect-language`: the CLI twin of the API's ``POST /v1/detect-language``."""

from __future__ import annotations

import json
import sys

import typer

from tagalign.cli.app import app, console
from tagalign.text.language import detect_language


@app.command("detect-language",
             short_help="Detect the language of a text among candidates (simplemma, as Annif).")
def detect_language_cmd(
    text: str = typer.Argument(..., help="Text to identify; '-' reads standard input."),
    languages: str = typer.Option("de,en", "--languages", "-l",
                                  help="Candidate languages, comma-separated (1 to 5)."),
    as_json: bool = typer.Option(False, "--json", help="Print Annif's JSON response shape."),
) -> None:
    """Detect the language of a text among candidate languages (simplemma, as in Annif).

    Prints each candidate with the share of words recognised as that language, best first;
    'unknown' is the share recognised as none.

    Example: tagalign detect-language "Schäden durch Pilze an Fachwerkgebäuden" -l de,en
    """

    if text == "-":
        text = sys.stdin.read()
    candidates = [c.strip() for c in languages.split(",") if c.strip()]
    ranked = detect_language(text, candidates)
    if as_json:
        print(json.dumps({"results": [{"language": lang, "score": score}
                                      for lang, score in ranked]}))
        return
    for lang, score in ranked:
        print(f"{lang or 'unknown'}\t{score:.4f}")
    if ranked[0][0] is None:
        console.print("no word of the text was recognised in any candidate language")
