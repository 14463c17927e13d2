"""From a trained project to ranked subjects per record."""

from tagalign.suggest.suggestion import Suggestion

__all__ = ["Suggestion"]
