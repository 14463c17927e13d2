"""The `Record` data class: one bibliographic record, the unit tagalign tags."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """A record's input text and, for training/evaluation, its gold subjects."""

    id: str
    title: str
    abstract: str = ""
    language: str | None = None
    type: str | None = None
    subjects: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """``title + " " + abstract``: the input text of every recipe (title first)."""
        return f"{self.title} {self.abstract}".strip()

    def to_json(self) -> dict:
        return {"id": self.id, "type": self.type, "lang": self.language, "title": self.title,
                "abstract": self.abstract, "subjects": list(self.subjects),
                "domains": list(self.domains)}
