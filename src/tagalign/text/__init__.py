"""Text normalisation shared by the lexical and TF-IDF sources."""

from tagalign.text.analyzer import Analyzer, guess_language

__all__ = ["Analyzer", "guess_language"]
