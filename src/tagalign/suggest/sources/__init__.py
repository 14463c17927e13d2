"""Candidate sources of the hybrid recipe, registered by name in `SOURCES` (one more,
``domains``, is the domain classifier's: `tagalign.classify.source`)."""

from tagalign.suggest.sources import labels, lexical, neighbours, omikuji  # noqa: F401
from tagalign.suggest.sources.base import (
    SOURCES,
    Batch,
    Candidates,
    Source,
    SourceConfig,
    register_source,
)

__all__ = ["SOURCES", "Batch", "Candidates", "Source", "SourceConfig", "register_source"]
