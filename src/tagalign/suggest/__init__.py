"""From a trained project to ranked subjects per record."""

from tagalign.suggest.suggestion import Quality, Suggestion, Tagged, keep_above

__all__ = ["Quality", "Suggestion", "Tagged", "keep_above"]
