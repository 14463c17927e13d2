"""From a trained project to ranked subjects per record: the request every suggesting
layer takes (`SuggestRequest`) and the answer it gives per record (`Tagged`)."""

from tagalign.suggest.request import (
    DEFAULT_THRESHOLD,
    DEPTH,
    LIMIT,
    MAX_LIMIT,
    PROJECT_DEFAULTS,
    THRESHOLD,
    Bound,
    SuggestRequest,
)
from tagalign.suggest.suggestion import Neighbours, Quality, Suggestion, Tagged, keep_above

__all__ = ["DEFAULT_THRESHOLD", "DEPTH", "LIMIT", "MAX_LIMIT", "PROJECT_DEFAULTS", "THRESHOLD",
           "Bound", "Neighbours", "Quality", "SuggestRequest", "Suggestion", "Tagged",
           "keep_above"]
