"""The `Recipe` interface and its registry (like Annif's backends).

A recipe turns training records into a model that ranks vocabulary subjects for new
records. Constructors only store parameters; `fit` learns; learned state ends in ``_``.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Self, TypeVar

from tagalign.errors import ConflictError, InputError, ModelFormatError, trained
from tagalign.io import atomic_dir, read_json
from tagalign.model_files import ModelFamily, now
from tagalign.records import Record
from tagalign.registry import Registry
from tagalign.runtime import Runtime
from tagalign.suggest import Suggestion, SuggestRequest, Tagged, keep_above
from tagalign.suggest.held_out import HeldOutEvidence
from tagalign.vocab import Vocabulary
from tagalign.vocab.changes.apply import VocabularyUpdate

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


T = TypeVar("T")


class Recipe(ModelFamily, ABC):
    """A subject-tagging strategy, selectable by ``name`` in a project's config; its
    ``defaults``, their ``ranges``, `check_params` and its manifest (``recipe.json``,
    `tagalign.recipes.saved`) as every model family's (`ModelFamily`)."""

    kind = "model"
    retrain = "the project (tagalign train)"
    manifest_name = "recipe.json"
    # format 1: the same files, saved before the manifest had the key
    model_format, read_formats, unversioned_format = 2, (1, 2), 1

    def __init__(self, vocab: Vocabulary, **params: Any):
        self.check_params(params)
        self.vocab = vocab
        self.params: dict[str, Any] = self.with_defaults(params)
        self._params_set()
        #: loaded with ``mmap``: arrays mapped from the files, so `learn` refuses
        self.read_only = False
        #: threads and the compiled-ranker choice (`set_runtime`; the defaults until then)
        self.runtime = Runtime()

    def _twin(self, params: dict[str, Any]) -> Self:
        return type(self)(self.vocab, **params)

    def set_runtime(self, runtime: Runtime) -> None:
        """Run with ``runtime`` from now on (`tagalign.project.Project` passes the one the
        CLI or server made); recipes with something to decide at load override it."""
        self.runtime = runtime

    def _trained(self, part: T | None) -> T:
        """``part``, learned by `fit` or read by `load` (`NotTrainedError` before them)."""
        return trained(part, f"recipe {self.name}", "run `tagalign train`")

    @abstractmethod
    def fit(self, records: Sequence[Record], *, workdir: Path) -> None:
        """Learn from ``records``; ``workdir`` holds finished phases so a rerun resumes."""

    def suggest(self, records: Sequence[Record], request: SuggestRequest) -> list[Tagged]:
        """The one way a recipe suggests: for each record (checked already:
        `tagalign.records.check_record`), its top ``request.limit`` subjects scoring at
        least ``request.floor`` (its threshold, None: 0), without ``request.exclude``, and what else
        the request asks for (`SuggestRequest`). ``request.domains`` is the project's
        matter (`tagalign.project.Tagger`), not the recipe's.

        A recipe implements `_suggest` (the plain ranking) and, when it can say more (a
        quality estimate, neighbour records), `_answer`; exclusions are handled here for
        all: the answer is made without them (its quality, ``ranking`` and neighbours
        describe that list), then only the lists that hold an excluded subject are made
        again (`_excluding`)."""
        if request.limit is None:
            raise ValueError("a recipe suggests for a request with a limit")
        threshold = request.floor
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
        limit, threshold, depth = request.limit or 0, request.floor, request.depth
        return [Tagged(keep_above(row[:limit], threshold),
                       ranking=row[:depth] if depth else None,
                       neighbours={} if request.neighbours else None)
                for row in self._suggest(records, max(limit, depth))]

    # -- persistence: every model family's `save(folder)` / `load(folder, ...)` ---------
    def save(self, folder: Path, saved: str | None = None) -> None:
        """The trained recipe into ``folder`` (``PROJECT/model/``), replaced atomically: its
        own files (`_save_state`) and the manifest ``recipe.json`` (`ModelFamily`) with the
        vocabulary's size and fingerprint, when it was saved (``saved``: when it was
        trained, for a model saved again after a vocabulary update) and a random id of this
        save."""
        with atomic_dir(folder) as tmp:
            self._save_state(tmp)
            self.write_manifest(
                tmp, self.params,
                vocabulary={"size": len(self.vocab), "fingerprint": self.vocab.fingerprint},
                saved=saved or now(),
                # new with every save: two models saved in the same second with the same
                # parameters still have different manifests, hence versions
                # (`tagalign.project.model_version`, which a server's reload compares)
                id=uuid.uuid4().hex)

    @classmethod
    def load(cls, folder: Path, vocab: Vocabulary, *, mmap: bool = False,
             runtime: Runtime | None = None) -> Recipe:
        """The recipe saved in ``folder`` (the one its manifest names; called on a recipe's
        class, that recipe), run with ``runtime``; refuses another vocabulary
        (`VocabularyMismatchError`) and a model this version cannot read
        (`ModelFormatError`, saying to retrain). ``mmap``: see `_load_state`."""
        meta = read_json(folder / cls.manifest_name)
        vocab.check(meta["vocabulary"]["fingerprint"], meta["vocabulary"]["size"],
                    f"model {folder}")
        cls.check_format(meta, folder)
        recipe_cls = get_recipe(meta["recipe"])
        if not issubclass(recipe_cls, cls):
            raise InputError(f"model {folder}: a {meta['recipe']!r} recipe, not {cls.name!r}")
        try:
            recipe = recipe_cls(vocab, **{**recipe_cls.introduced, **meta["params"]})
            if mmap:  # only then: a recipe with nothing to map may not take the keyword
                recipe._load_state(folder, mmap=True)
            else:
                recipe._load_state(folder)
        except (OSError, KeyError, TypeError) as exc:
            raise ModelFormatError(
                f"model {folder} is incomplete or was saved by an older tagalign "
                f"({type(exc).__name__}: {exc}): retrain the project (tagalign train)") from exc
        recipe.set_runtime(runtime or Runtime())
        return recipe

    @abstractmethod
    def _save_state(self, path: Path) -> None:
        """Write the trained state into the (empty, temporary) folder ``path``."""

    @abstractmethod
    def _load_state(self, path: Path, *, mmap: bool = False) -> None:
        """Restore what `_save_state` wrote, without pickle, into this recipe (made from the
        saved parameters).

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

    def check_vocabulary_update(self) -> None:
        """Refuse (`InputError`, saying why and to retrain) vocabulary changes this recipe
        cannot take without retraining; asked before a change file is read, so a refused
        update reads and writes nothing. Only a recipe with an update path (the hybrid's
        sources know headings by their labels) takes them: here none has."""
        raise InputError(f"recipe {self.name!r} has no update path for vocabulary changes "
                         "(its model knows only the headings it was trained with; only the "
                         "hybrid recipe takes new headings and redirects without "
                         "retraining): retrain the project with the updated vocabulary "
                         "(`tagalign train`)")

    def take_vocabulary(self, update: VocabularyUpdate) -> None:
        """Suggest with ``update.new`` from now on, without retraining (`tagalign.vocab.
        changes.apply`: new headings appended, corrected ones relabelled, retired ones
        kept); a recipe that cannot refuses (`check_vocabulary_update`)."""
        self.check_vocabulary_update()

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
