"""Bad input is reported, never silently dropped: `InputReport` counts what the loaders
skipped and which gold ids a vocabulary lacked.

The report prints nothing. Each of the first ``max_shown`` skipped items is a warning on
the ``tagalign.io.report`` logger (``skipped path:line: reason``), and `end_summary` is the
one line an interface shows at the end of a run; the CLI prints both through its console.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from tagalign.errors import InputError

log = logging.getLogger(__name__)


class BadInputError(InputError):
    """Raised in strict mode at the first malformed line or file."""


@dataclass
class InputReport:
    """Counts and first examples of skipped input and of gold ids missing from a vocabulary.

    ``strict=True`` turns the first problem into a `BadInputError`. ``stream``: a sink the
    caller owns for the warnings instead of the log (``io.StringIO()`` keeps a run quiet).
    """

    strict: bool = False
    stream: TextIO | None = None
    max_shown: int = 10
    max_kept: int = 1000  # messages kept in `skipped`; `n_skipped` counts them all
    skipped: list[str] = field(default_factory=list)
    n_skipped: int = 0
    missing_subjects: Counter = field(default_factory=Counter)
    records_read: int = 0

    def bad(self, where: str, why: str) -> None:
        """Report one malformed item (``where`` = ``path:line`` or a path)."""
        message = f"{where}: {why}"
        if self.strict:
            raise BadInputError(message)
        self.n_skipped += 1
        if len(self.skipped) < self.max_kept:
            self.skipped.append(message)
        if self.n_skipped > self.max_shown:
            return
        if self.stream is not None:
            self.stream.write(f"warning: skipped {message}\n")
        else:
            log.warning("skipped %s", message)

    def missing(self, subject_id: str) -> None:
        self.missing_subjects[subject_id] += 1

    def summary(self) -> str:
        parts = [f"{self.records_read} records read"]
        if self.n_skipped:
            parts.append(f"{self.n_skipped} malformed items skipped")
        if self.missing_subjects:
            n = sum(self.missing_subjects.values())
            parts.append(f"{n} gold subject ids ({len(self.missing_subjects)} distinct) "
                         "not in the vocabulary, dropped")
        return "; ".join(parts)

    def end_summary(self) -> str | None:
        """The end-of-run `summary`, only when something was skipped or dropped (else None)."""
        return self.summary() if self.n_skipped or self.missing_subjects else None
