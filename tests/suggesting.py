"""The suggestions a project gives through its one entry point (`Tagger.tag`), as lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tagalign.project import Project, Tagger
from tagalign.records import Record
from tagalign.suggest import Suggestion, SuggestRequest, Tagged


def suggestions(project: Project, records: Sequence[Record], **request: Any
                ) -> list[list[Suggestion]]:
    """Each record's suggestions for ``SuggestRequest(**request)``, no quality estimate."""
    ask = SuggestRequest(**{"quality": False, **request})
    return [t.suggestions for t in Tagger(project).tag(records, ask)]


def tag(project: Project, records: Sequence[Record], **request: Any) -> list[Tagged]:
    """Each record's whole answer (`Tagged`) to ``SuggestRequest(**request)``."""
    return Tagger(project).tag(records, SuggestRequest(**request))
