"""`Tagger`: a project's records tagged as one request asks (`SuggestRequest` → `Tagged`).

What lies between a loaded project and its recipe: each record checked once
(`tagalign.records.check_record`), the limit and threshold a request leaves open taken
from the project for the record's language (records cut alike go to the recipe together),
the project's rules added to the request's exclusions, and the domains read off the same
pass as the subjects (`tagalign.project.domains`). The forked jobs of `tagalign suggest
--jobs` run one of these in each process (`tagalign.project.jobs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tagalign.errors import UsageError
from tagalign.project.config import DEFAULT_LIMIT
from tagalign.records import EMPTY_WARNING, Checked, Record, check_record
from tagalign.suggest import PROJECT_DEFAULTS, SuggestRequest, Tagged
from tagalign.text import guess_language
from tagalign.vocab import normalize_subject_id

if TYPE_CHECKING:
    from tagalign.project.folder import Project


class Tagger:
    """``Tagger(project).tag(records, SuggestRequest(limit=10))``: one `Tagged` per record.

    ``default_limit``: the limit of a request that gives none when the project has none
    either (`Project.defaults`; Annif's API keeps Annif's 10)."""

    def __init__(self, project: Project, default_limit: int = DEFAULT_LIMIT):
        self.project = project
        self.default_limit = default_limit

    def tag(self, records: Sequence[Record | Checked],
            request: SuggestRequest = PROJECT_DEFAULTS) -> list[Tagged]:
        """Suggestions, warning and what else ``request`` asks for, per record.

        Degenerate records never reach the recipe as they are: empty text gets no
        suggestions, no quality and `EMPTY_WARNING`; text over `MAX_TEXT_CHARS` is cut, with
        a warning saying so. Records given as `Checked` (the file loop checks each as it
        reads it) are taken as they are.

        A ``limit`` or ``threshold`` of None takes the project's value for the record's
        language (`Project.defaults`: the projects file's, else the saved one, else
        ``default_limit`` and 0). ``exclude``: subject ids or GND URIs, on top of the
        project's rules. ``domains``: each record's domains from the attached domain model
        (`UsageError` without one), read off the same ranking as the subjects, before
        exclusions."""
        project = self.project
        recipe = project.trained_recipe()
        model = project.domain_model if request.domains else None
        if request.domains and model is None:
            raise UsageError(f"project {project.path.name} has no domain model attached")
        banned = project.excluded
        if request.exclude:
            # an id of a redirected heading stands for its target (`Vocabulary.current`)
            banned = banned | {project.vocab.current(normalize_subject_id(i))
                               for i in request.exclude}
        checked = [r if isinstance(r, Checked) else check_record(r) for r in records]
        out = [Tagged([], warning) for _, warning in checked]
        todo = [i for i, (_, warning) in enumerate(checked) if warning != EMPTY_WARNING]
        groups: dict[tuple[int, float], list[int]] = {}  # records cut alike
        for i in todo:
            groups.setdefault(self._cut(checked[i].record, request), []).append(i)
        ask = replace(request, exclude=banned)
        if model is not None:  # one ranking, deep enough for the domain model
            ask = replace(ask, depth=max(request.depth, model.depth), neighbours=True)
        for (limit, threshold), idx in groups.items():
            recs = [checked[i].record for i in idx]
            answers = recipe.suggest(recs, replace(ask, limit=limit, threshold=threshold))
            if model is not None:
                found = model.predict(recs, [t.ranking or [] for t in answers],
                                      [t.neighbours or {} for t in answers])
                for t, domains in zip(answers, found, strict=True):
                    t.domains = domains
                    t.ranking = (t.ranking or [])[:request.depth] if request.depth else None
                    t.neighbours = t.neighbours if request.neighbours else None
            for i, t in zip(idx, answers, strict=True):
                t.warning = out[i].warning
                out[i] = t
        return out

    def _cut(self, record: Record, request: SuggestRequest) -> tuple[int, float]:
        """The request's limit and threshold, each the project's for the record's language
        where the request gives none (the language is guessed only when the project keeps
        values by language)."""
        limit, threshold = request.limit, request.threshold
        if limit is not None and threshold is not None:
            return limit, threshold
        project, lang = self.project, None
        by_language = project.config.defaults_by_language
        if by_language:  # guessing costs time: only when it matters
            lang = record.language if record.language in by_language \
                else guess_language(record.text)
        saved_limit, saved_threshold = project.defaults(lang, self.default_limit)
        return (saved_limit if limit is None else limit,
                saved_threshold if threshold is None else threshold)
