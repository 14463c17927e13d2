"""How one project is served: settings of a deployment, never saved in the project folder.

`ServingSettings` is the one definition of them, whoever gives them: a projects file's
table (`tagalign.projects_file`), the ``serve`` options for project folders (``--allow-learn``,
``--domains``), a reload (the new model takes the old one's) or a Python caller. A
`Project` is loaded with them (`Project.load(path, serving=…)`) or gets a copy with others
(`Project.with_serving`); a loaded project's settings never change.

The settings of the server process as a whole (port, workers, tokens, …) are
`tagalign.serve.settings.ServerSettings`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tagalign.errors import InputError
from tagalign.vocab import Vocabulary
from tagalign.vocab.rules import SubjectRules

log = logging.getLogger(__name__)


class ServingSettingError(InputError):
    """A serving setting does not fit the project (``key``: the setting, as a projects file
    names it)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class ServingSettings:
    """One project's serving settings (Annif's project keys of the same names).

    ``name``: the name shown to clients (default: the one saved in ``project.json``);
    ``language``: the label language of Annif's ``/v1`` results (default: the vocabulary's
    first); ``limit``, ``threshold``: what a request without them gets (default: the values
    saved in the folder, see `Project.defaults`); ``allow_learn``: learning through the
    REST APIs (default off, as in Annif); ``rules``: subjects never suggested (Annif's
    vocabulary ``exclude``/``include``); ``feedback_db``: the SQLAlchemy URL of the feedback
    store (None: `tagalign.project.feedback_location`'s default); ``domain_model``: the
    folder of a domain model served beside the subjects (`tagalign.project.domains`; the
    projects file's ``domains`` key, ``serve --domains``)."""

    name: str | None = None
    language: str | None = None
    limit: int | None = None
    threshold: float | None = None
    allow_learn: bool = False
    rules: SubjectRules = field(default_factory=SubjectRules)
    feedback_db: str | None = None
    domain_model: Path | None = None

    def check(self, vocab: Vocabulary) -> None:
        """Refuse settings that do not fit ``vocab``: rules naming unknown subjects (a typo
        would exclude nothing, silently), a language the vocabulary has no labels in."""
        unknown = self.rules.unknown(vocab)
        if unknown:
            raise ServingSettingError(
                "exclude/include", "subject ids not in the vocabulary: "
                + ", ".join(unknown[:10])
                + (f" (+{len(unknown) - 10} more)" if len(unknown) > 10 else ""))
        moved = self.rules.redirected(vocab)
        if moved:
            log.warning("exclude/include name redirected headings, read as their targets: "
                        "%s", ", ".join(f"{old} → {new}" for old, new in moved.items()))
        if self.language is not None and self.language not in vocab.languages:
            raise ServingSettingError(
                "language", f"{self.language!r} is not a language of the vocabulary "
                f"({', '.join(vocab.languages)})")


__all__ = ["ServingSettingError", "ServingSettings"]
