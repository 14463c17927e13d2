"""`SuggestRequest`: what a caller asks of every suggesting layer, in one frozen value.

The recipe (`tagalign.recipes.Recipe.suggest`), the hybrid's pipeline
(`HybridPipeline.suggest`), a project's tagger (`tagalign.project.Tagger.tag`), the
forked jobs (`TaggingJobs.submit`) and the service (`tagalign.serve.service.Service.suggest`)
each take records and one of these, and answer with one `Tagged` per record.

The bounds of its fields are declared here once (`LIMIT`, `THRESHOLD`, `DEPTH`), with one
message each; `tagalign suggest`'s options, both REST APIs' bodies and forms, and this
class itself check a value against them, so a bad one is refused alike everywhere (each
channel names the field its own way: ``--limit``, ``limit: …``). The one difference is
Annif's (`tagalign.serve.annif`): its document sets no maximum, so a larger limit there is
cut to `MAX_LIMIT` rather than refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Bound:
    """The inclusive range ``low``..``high`` (None: no upper end) a request's field
    ``name`` must lie in, and the one message saying so."""

    name: str
    low: float
    high: float | None = None

    @property
    def message(self) -> str:
        """E.g. ``must be between 0 and 1000`` (the field is named by each channel)."""
        if self.high is None:
            return f"must be at least {self.low:g}"
        return f"must be between {self.low:g} and {self.high:g}"

    @property
    def span(self) -> str:
        """E.g. ``0..1000`` (``0..`` without an upper end), for help texts."""
        return f"{self.low:g}.." + ("" if self.high is None else f"{self.high:g}")

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies in the range (NaN never does)."""
        return value >= self.low and (self.high is None or value <= self.high)

    def check(self, value: float | None) -> None:
        """A ValueError naming the field (``limit: must be …``) unless ``value`` is None
        or in range."""
        if value is not None and not self.holds(value):
            raise ValueError(f"{self.name}: {self.message}")


#: the most subjects one record may ask for (more than this are never useful)
MAX_LIMIT = 1000
#: subjects per record; 0 asks for none (Annif's minimum, kept everywhere)
LIMIT = Bound("limit", 0, MAX_LIMIT)
#: the lowest score returned
THRESHOLD = Bound("threshold", 0.0, 1.0)
#: the uncut ranking's length beside the list (`Tagged.ranking`)
DEPTH = Bound("depth", 0)
#: the threshold a recipe applies when a request leaves it open (every score)
DEFAULT_THRESHOLD = 0.0


@dataclass(frozen=True, slots=True)
class SuggestRequest:
    """``limit``: subjects per record; ``threshold``: the lowest score returned. None (both):
    the project's value for the record's language (`tagalign.project.Tagger`); a recipe
    needs a ``limit``, and reads a ``threshold`` of None as `DEFAULT_THRESHOLD`
    (`floor`). Each lies within its bound (`LIMIT`, `THRESHOLD`, `DEPTH`: a ValueError
    with the bound's message otherwise).

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

    BOUNDS: ClassVar[tuple[Bound, ...]] = (LIMIT, THRESHOLD, DEPTH)

    def __post_init__(self) -> None:
        if not isinstance(self.exclude, frozenset):  # any collection of ids; kept hashable
            object.__setattr__(self, "exclude", frozenset(self.exclude))
        for bound in self.BOUNDS:
            bound.check(getattr(self, bound.name))

    @classmethod
    def ranking(cls, limit: int, *, neighbours: bool = False) -> SuggestRequest:
        """The plain ranking: each record's top ``limit`` at any score, no quality
        estimate (tuning, a domain model's examples), with the neighbour records if
        asked."""
        return cls(limit=limit, threshold=DEFAULT_THRESHOLD, quality=False,
                   neighbours=neighbours)

    @property
    def floor(self) -> float:
        """The lowest score a recipe returns: ``threshold``, else `DEFAULT_THRESHOLD`."""
        return DEFAULT_THRESHOLD if self.threshold is None else self.threshold


#: a request that leaves everything to the project (its limit and threshold) and the
#: defaults: what `Tagger.tag` and `tagalign.workflows.tag_file` ask without one
PROJECT_DEFAULTS = SuggestRequest()
