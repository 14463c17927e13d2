"""From a trained project to ranked subjects per record."""

from tagalign.suggest.suggestion import Neighbours, Quality, Suggestion, Tagged, keep_above

__all__ = ["Neighbours", "Quality", "Suggestion", "Tagged", "keep_above"]
