"""The `Recipe` interface and its registry (like Annif's backends).

A recipe turns training records into a model that ranks vocabulary subjects for new
records. Constructors only store parameters; `fit` learns; learned state ends in ``_``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from tagalign.errors import ConflictError, InputError
from tagalign.params import ParamSpec
from tagalign.records import Record
from tagalign.registry import Registry
from tagalign.runtime import Runtime
from tagalign.suggest import Suggestion, SuggestRequest, Tagged, keep_above
from tagalign.suggest.held_out import HeldOutEvidence
from tagalign.vocab import Vocabulary

#: Recipes by name; the built-in ones are imported on first lookup (their modules register
#: them), so ``tagalign --help`` does not pay for torch and sentence-transformers.
RECIPES: Registry[type[Recipe]] = Registry("recipe", choose="known:", lazy={
    "hybrid": "tagalign.recipes.hybrid",
    "lexical": "tagalign.recipes.lexical",
    "zero-shot": "tagalign.recipes.zero_shot",
    "ynu-finetune": "tagalign.recipes.ynu",
    "nbf-attention": "tagalign.recipes.nbf",
    "focused-transform": "tagalign.recipes.focused",
})
register_recipe = RECIPES.register

#: parameters `tagalign hyperopt` may tune: name → (low, high, kind), kind "int" or "float"
SearchSpace = dict[str, tuple[float, float, str]]
#: rankings of some records under trial parameters: per record, (subject id, score) best first
TrialRun = Callable[[dict[str, Any]], list[list[tuple[str, float]]]]


def recipe_names() -> list[str]:
    """Every selectable recipe name (built-in and registered), sorted."""
    return RECIPES.names()


def get_recipe(name: str) -> type[Recipe]:
    """The recipe class called ``name`` (a ValueError listing the known names if none)."""
    return RECIPES.lookup(name)


class ReadOnlyError(ConflictError, PermissionError):
    """A model loaded memory-mapped (``mmap=True``, ``--mmap``) was asked to learn: 409,
    the state the model was loaded in conflicts with a write (reloading it without
    ``--mmap`` resolves it); 403 stays for who asks (a token, ``allow_learn``). Annif's
    ``/v1`` answers it with the 403 its document declares for learn (`tagalign.serve.annif`).
    A `PermissionError` too, as it was before."""


def read_only_message(what: str) -> str:
    """The one wording of the refusal (CLI, Python API and both REST APIs)."""
    return f"{what} was loaded with --mmap: read-only; reload without it to learn"


class Recipe(ABC):
    """A subject-tagging strategy, selectable by ``name`` in a project's config."""

    name: ClassVar[str]
    #: Published defaults; every key may be overridden in the project config.
    defaults: ClassVar[dict[str, Any]] = {}

    #: Ranges of parameters not in `tagalign.params.RANGES` (names → `Annotated` types).
    ranges: ClassVar[dict[str, Any]] = {}
    #: Parameters the recipe once had: dropped from saved configs when they load
    retired: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        """Refuse unknown names (ValueError) and bad values (`ParamError`: name, value,
        allowed range), before any data or model is loaded."""
        unknown = set(params) - set(cls.defaults) - cls.retired
        if unknown:
            raise InputError(f"recipe {cls.name!r} has no parameter(s) {sorted(unknown)}; "
                             f"known: {sorted(cls.defaults)}")
        ParamSpec(f"recipe {cls.name!r}", cls.defaults, **cls.ranges).check(params)

    def __init__(self, vocab: Vocabulary, **params: Any):
        self.check_params(params)
        self.vocab = vocab
        self.params: dict[str, Any] = {**self.defaults, **{
            k: v for k, v in params.items() if k not in self.retired}}
        #: loaded with ``mmap``: arrays mapped from the files, so `learn` refuses
        self.read_only = False
        #: threads and the compiled-ranker choice (`set_runtime`; the defaults until then)
        self.runtime = Runtime()

    def set_runtime(self, runtime: Runtime) -> None:
        """Run with ``runtime`` from now on (`tagalign.project.Project` passes the one the
        CLI or server made); recipes with something to decide at load override it."""
        self.runtime = runtime

    @abstractmethod
    def fit(self, records: Sequence[Record], *, workdir: Path) -> None:
        """Learn from ``records``; ``workdir`` holds finished phases so a rerun resumes."""

    def suggest(self, records: Sequence[Record], request: SuggestRequest) -> list[Tagged]:
        """The one way a recipe suggests: for each record (checked already:
        `tagalign.records.check_record`), its top ``request.limit`` subjects scoring at
        least ``request.threshold`` (None: 0), without ``request.exclude``, and what else
        the request asks for (`SuggestRequest`). ``request.domains`` is the project's
        matter (`tagalign.project.Tagger`), not the recipe's.

        A recipe implements `_suggest` (the plain ranking) and, when it can say more (a
        quality estimate, neighbour records), `_answer`; exclusions are handled here for
        all: the answer is made without them (its quality, ``ranking`` and neighbours
        describe that list), then only the lists that hold an excluded subject are made
        again (`_excluding`)."""
        if request.limit is None:
            raise ValueError("a recipe suggests for a request with a limit")
        threshold = request.threshold or 0.0
        banned = request.exclude
        if banned and not (request.quality or request.depth or request.neighbours):
            # nothing but the lists wanted: the excluding run alone
            return [Tagged(keep_above(row, threshold))
                    for row in self._excluding(records, request.limit, banned)]
        answers = self._answer(records, replace(request, exclude=frozenset()))
        redo = [i for i, t in enumerate(answers) if any(s.id in banned for s in t.suggestions)]
        if redo:
            rows = self._excluding([records[i] for i in redo], request.limit, banned)
            for i, row in zip(redo, rows, strict=True):
                answers[i].suggestions = keep_above(row, threshold)
        return answers

    @abstractmethod
    def _suggest(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        """Ranked suggestions, best first, ``limit`` at most, for each record (as Annif's
        backends' ``_suggest``: `suggest` adds the rest)."""

    def _answer(self, records: Sequence[Record], request: SuggestRequest) -> list[Tagged]:
        """`suggest` without exclusions; here from one `_suggest` run deep enough for
        ``depth``: no quality estimate (this recipe has no estimator), no neighbours."""
        limit, threshold, depth = request.limit or 0, request.threshold or 0.0, request.depth
        return [Tagged(keep_above(row[:limit], threshold),
                       ranking=row[:depth] if depth else None,
                       neighbours={} if request.neighbours else None)
                for row in self._suggest(records, max(limit, depth))]

    @abstractmethod
    def save(self, path: Path) -> None:
        """Write the trained state into the (empty, temporary) folder ``path``."""

    @classmethod
    @abstractmethod
    def load(cls, path: Path, vocab: Vocabulary, params: dict[str, Any], *,
             mmap: bool = False) -> Recipe:
        """Restore a recipe saved by `save`, without pickle.

        ``mmap``: map the large arrays (vector indexes, record matrices) from their files
        instead of reading them into memory, and set ``read_only``; a recipe with nothing
        worth mapping may ignore it."""

    def params_saved(self, folder: Path) -> None:  # noqa: B027 - optional hook
        """Called after parameters changed without retraining (`Project.set_params`)
        reloaded the model from ``folder``: a recipe whose saved parts depend on them
        brings those up to date (the hybrid's quality estimate)."""

    def _excluding(self, records: Sequence[Record], limit: int, banned: Collection[str]
                   ) -> list[list[Suggestion]]:
        """The top ``limit`` per record with ``banned`` subject ids (if any) removed.

        At most ``len(banned)`` of a recipe's candidates can be banned, so asking for
        ``limit + len(banned)`` always leaves ``limit`` allowed ones when there are that
        many. To keep a large exclusion (``exclude = "*"``) cheap, the request starts
        smaller and doubles only for the records whose list came back full yet short."""
        if not banned:
            return self._suggest(records, limit)
        ceiling = limit + min(len(banned), len(self.vocab))
        k = min(ceiling, limit + max(limit, 16))
        out: list[list[Suggestion]] = [[] for _ in records]
        todo = list(range(len(records)))
        while todo:
            rows = self._suggest([records[i] for i in todo], k)
            again: list[int] = []
            for i, row in zip(todo, rows, strict=True):
                kept = [s for s in row if s.id not in banned]
                out[i] = kept[:limit]
                if len(kept) < limit and len(row) >= k and k < ceiling:
                    again.append(i)  # a full list: more candidates may exist further down
            todo, k = again, min(ceiling, 2 * k)
        return out

    def held_out_evidence(self) -> HeldOutEvidence | None:
        """Suggestions and neighbour records for training records from models that never
        saw them (`tagalign.suggest.held_out`), when the recipe keeps them; None here."""
        return None

    def seen_record_ids(self) -> frozenset[str] | None:
        """Ids of the records the model learned from, when it keeps them (None: unknown);
        a stacker must never learn on suggestions for these."""
        return None

    def search_space(self) -> SearchSpace:
        """Parameters that change what a *trained* model suggests without retraining it
        (`tagalign hyperopt` tunes them in seconds per trial); default: none."""
        return {}

    def tuned_values(self) -> dict[str, Any]:
        """The current value of each `search_space` parameter (a study's first trial)."""
        return {name: self.params[name] for name in self.search_space()}

    def trial_run(self, records: Sequence[Record], depth: int) -> TrialRun:
        """Prepare ``records`` once; the returned function ranks them (``depth`` subjects
        each) under the trial's values of `search_space` parameters. Recipes with a
        search space implement it."""
        raise NotImplementedError(f"recipe {self.name!r} has no tunable parameters")

    def learn(self, records: Sequence[Record]) -> None:  # noqa: B027 - optional hook
        """Take confirmed records at once (online feedback); default: not supported."""
        raise NotImplementedError(f"recipe {self.name!r} does not learn online")

    def _label(self, subject_id: str, language: str | None) -> str:
        return self.vocab.label(subject_id, language)
