"""A vocabulary's life between two trainings: the changes the GND-Änderungsdienst (MARC 21),
a SKOS release or a whole newer dump say, folded into a `ChangeSet` and weighed against a
vocabulary (`summarize`). Applying them to a trained project is the project layer's job."""

from tagalign.vocab.changes.model import (
    KINDS,
    Announced,
    Change,
    ChangeSet,
    Deleted,
    Heading,
    Redirected,
    Split,
)
from tagalign.vocab.changes.read import (
    CHANGE_READERS,
    BadChangesError,
    change_format,
    read_changes,
)
from tagalign.vocab.changes.summary import (
    ChangeSummary,
    diff_vocabularies,
    read_whole,
    summarize,
)

__all__ = [
    "CHANGE_READERS",
    "KINDS",
    "Announced",
    "BadChangesError",
    "Change",
    "ChangeSet",
    "ChangeSummary",
    "Deleted",
    "Heading",
    "Redirected",
    "Split",
    "change_format",
    "diff_vocabularies",
    "read_changes",
    "read_whole",
    "summarize",
]
