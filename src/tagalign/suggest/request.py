"""`SuggestRequest`: what a caller asks of every suggesting layer, in one frozen value.

The recipe (`tagalign.recipes.Recipe.suggest`), the hybrid's pipeline
(`HybridPipeline.suggest`), a project's tagger (`tagalign.project.Tagger.tag`), the
forked jobs (`TaggingJobs.submit`) and the service (`tagalign.serve.service.Service.suggest`)
each take records and one of these, and answer with one `Tagged` per record.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SuggestRequest:
    """``limit``: subjects per record; ``threshold``: the lowest score returned. None (both):
    the project's value for the record's language (`tagalign.project.Tagger`); a recipe
    needs a ``limit``, and reads a ``threshold`` of None as 0.

    ``exclude``: subject ids never returned (the ``limit`` is still filled from the
    others); the quality estimate, the ``ranking`` and the domains describe the list before
    them. A project adds its own rules' exclusions and reads GND URIs as ids.

    ``quality``: the recipe's estimate of each list (`Tagged.quality`; None where the
    recipe has no estimator). ``depth`` > 0: each record's top ``depth`` uncut by
    ``threshold`` or ``exclude`` too (`Tagged.ranking`), from the same pass.
    ``neighbours``: each record's neighbour records by source (`Tagged.neighbours`; {} from
    a recipe that searches no records). ``domains``: each record's domains from the
    project's domain model (`Tagged.domains`; a project layer's matter: a recipe ignores
    it)."""

    limit: int | None = None
    threshold: float | None = None
    exclude: frozenset[str] = field(default_factory=frozenset)
    quality: bool = True
    depth: int = 0
    neighbours: bool = False
    domains: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.exclude, frozenset):  # any collection of ids; kept hashable
            object.__setattr__(self, "exclude", frozenset(self.exclude))
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be >= 0, got {self.limit}")
        if self.depth < 0:
            raise ValueError(f"depth must be >= 0, got {self.depth}")
