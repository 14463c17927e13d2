"""A `Project`: one folder holding a vocabulary, a recipe's config and its trained model.

Layout::

    PROJECT/project.json   name, recipe, vocabulary fingerprint, versions, scores, saved
                           defaults (the params asked for only until the model is written)
    PROJECT/vocab.json.gz  the vocabulary, saved once (fast load)
    PROJECT/model/         the trained recipe (written atomically; safetensors/JSON/npy);
                           its manifest recipe.json holds the one copy of its params
    PROJECT/work/          finished training phases, so an interrupted train resumes
    PROJECT/feedback.sqlite librarians' decisions (`feedback_location`; or a shared store)

The CLI, the REST API and the benchmarks are thin layers over this class.
"""

from __future__ import annotations

import copy
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tagalign.errors import (
    InputError,
    NoSpaceError,
    NotTrainedError,  # also imported from here (`tagalign.serve`)
    TagalignError,
)
from tagalign.io import versions, write_json_atomic
from tagalign.project.config import (
    CONFIG_NAME,
    DEFAULT_LIMIT,
    DEFAULT_RECIPE,
    MODEL_DIR,
    WORK_DIR,
    LearningNotAllowedError,
    ProjectConfig,
    ProjectExistsError,
    read_project_config,
    require_project,
    saved_params,
)
from tagalign.project.info import project_info
from tagalign.project.serving import ServingSettingError, ServingSettings
from tagalign.project.version import ModelVersion, model_version
from tagalign.recipes import ReadOnlyError, Recipe, get_recipe, read_only_message
from tagalign.recipes.saved import now as _now
from tagalign.records import Record
from tagalign.runtime import Runtime
from tagalign.vocab import Vocabulary
from tagalign.vocab.rules import SubjectRules

if TYPE_CHECKING:  # loading one imports the classifiers (and torch): only when attached
    from tagalign.project.domains import DomainModel


class Project:
    """A project folder with its trained model, served with fixed `ServingSettings`.

    ``serving``: how it is served (a projects file's table, ``serve`` options; made here:
    none of them), given to `load`, `create` or `draft`; ``domain_model``: the domain model
    ``serving.domain_model`` names, loaded with it (not the hybrid's ``domains`` source,
    which is subject evidence inside the recipe). Neither changes once the project is made: a
    project served otherwise is another `Project` (`with_serving`)."""

    def __init__(self, path: Path, config: ProjectConfig, vocab: Vocabulary,
                 recipe: Recipe | None = None, mmap: bool = False,
                 runtime: Runtime | None = None):
        self.path = Path(path)
        self.config = config
        self.vocab = vocab
        self.recipe = recipe
        #: loaded memory-mapped: suggests as usual, never learns (`learn` refuses)
        self.mmap = mmap
        #: threads and the compiled-ranker choice, handed to the recipe
        self.runtime = runtime or Runtime()
        self._serving = ServingSettings()
        self._domain_model: DomainModel | None = None
        #: the version of the loaded model (`tagalign.project.model_version`, read when it
        #: was loaded or saved; None: no model)
        self.model_version: ModelVersion | None = None
        self._excluded: tuple[SubjectRules, frozenset[str]] | None = None
        #: seconds `load` took (vocabulary and model; None: not loaded by `load`), for the
        #: server's ``tagalign_model_load_seconds``
        self.load_seconds: float | None = None

    # -- how it is served (read-only: `with_serving` makes a project served otherwise) --
    @property
    def serving(self) -> ServingSettings:
        return self._serving

    @property
    def domain_model(self) -> DomainModel | None:
        """The domain model `tag(domains=True)` answers with (`tagalign.project.domains`)."""
        return self._domain_model

    @property
    def allow_learn(self) -> bool:
        return self._serving.allow_learn

    @property
    def rules(self) -> SubjectRules:
        return self._serving.rules

    @property
    def language(self) -> str | None:
        return self._serving.language

    @property
    def limit(self) -> int | None:
        return self._serving.limit

    @property
    def threshold(self) -> float | None:
        return self._serving.threshold

    @property
    def feedback_db(self) -> str | None:
        return self._serving.feedback_db

    @property
    def name(self) -> str | None:
        """The name clients see: the serving settings', else the one saved."""
        return self._serving.name or self.config.name

    def with_serving(self, serving: ServingSettings,
                     domain_model: DomainModel | None = None) -> Project:
        """This project (the same folder, vocabulary and model, shared) served with
        ``serving``, checked against the vocabulary (`ServingSettingError`). Its domain
        model: ``domain_model`` rebound to this vocabulary (a reload's new project takes the
        old one's), else the one ``serving.domain_model`` names, loaded here."""
        serving.check(self.vocab)
        if domain_model is not None:
            domain_model.bind(self.vocab)
        elif serving.domain_model is not None:
            # here, not at the top: the classifiers import torch, which a project served
            # without a domain model never needs
            from tagalign.project.domains import DomainModel

            try:
                domain_model = DomainModel.load(serving.domain_model, self.vocab)
            except (TagalignError, OSError, ValueError) as exc:
                raise ServingSettingError("domains", str(exc)) from exc
        served = copy.copy(self)
        served._serving, served._domain_model = serving, domain_model
        return served

    # -- creation and loading ----------------------------------------------------------
    @classmethod
    def create(cls, path: Path | str, vocab: Vocabulary, recipe: str = DEFAULT_RECIPE,
               params: dict[str, Any] | None = None, name: str | None = None,
               overwrite: bool = False, *, runtime: Runtime | None = None,
               serving: ServingSettings | None = None) -> Project:
        """Start a project folder (vocabulary saved once, config written atomically).
        ``runtime``, ``serving``: as `load` takes them."""
        path = Path(path)
        recipe_cls = get_recipe(recipe)
        recipe_cls(vocab, **(params or {}))  # validates parameter names now, not after hours
        if (path / CONFIG_NAME).exists() and not overwrite:
            old = read_project_config(path)
            if old.makes_same_model(path, recipe_cls, params or {}):
                vocab.check(old.vocabulary["fingerprint"], old.vocabulary["size"],
                            f"project {path}")
                return cls(path, old, vocab, runtime=runtime)._served(serving)
            raise ProjectExistsError(f"{path} already holds a project with recipe "
                               f"{old.recipe!r}; use --overwrite to replace it")
        path.mkdir(parents=True, exist_ok=True)
        vocab.save(path)
        project = cls.draft(path, vocab, recipe, params, name, runtime=runtime)
        project._write_config()
        return project._served(serving)

    @classmethod
    def draft(cls, path: Path | str, vocab: Vocabulary, recipe: str | None = DEFAULT_RECIPE,
              params: dict[str, Any] | None = None, name: str | None = None, *,
              runtime: Runtime | None = None, serving: ServingSettings | None = None
              ) -> Project:
        """A project not saved (yet): the config `create` would write, nothing written (a
        projects file's table whose folder holds no project is served untrained; its
        recipe may be unknown yet: None)."""
        path = Path(path)
        config = ProjectConfig.from_json({
            "format": "tagalign-project",
            "name": name or path.name,
            "recipe": recipe,
            "params": params or {},  # until training writes the model (`save_model`)
            "vocabulary": {"size": len(vocab), "fingerprint": vocab.fingerprint,
                           "languages": vocab.languages},
            "created": _now(),
            "trained_at": None,
            "versions": versions(),
        })
        return cls(path, config, vocab, runtime=runtime)._served(serving)

    def _served(self, serving: ServingSettings | None) -> Project:
        return self if serving is None else self.with_serving(serving)

    @classmethod
    def load(cls, path: Path | str, vocab: Vocabulary | None = None, *,
             mmap: bool = False, runtime: Runtime | None = None,
             serving: ServingSettings | None = None) -> Project:
        """Load a trained (or just created) project; refuses a mismatched vocabulary.

        ``mmap``: the recipe maps its large arrays (the hybrid: its vector indexes, record
        matrices and label lists) from the files instead of reading them into memory — less
        memory, shared by processes on one machine, the first queries read from disk — and
        the project is read-only: `learn` raises `ReadOnlyError`. ``runtime``: threads and
        whether the ranker runs compiled (`tagalign.runtime.Runtime`; default its defaults).
        ``serving``: how it is served (`with_serving`; default: no serving settings).
        A model saved in a format this version does not read is refused
        (`ModelFormatError`, saying to retrain)."""
        start = time.perf_counter()
        path = Path(path)
        config = read_project_config(path, "; create one with `tagalign train`")
        if vocab is None:
            vocab = Vocabulary.load(path)
        vocab.check(config.vocabulary["fingerprint"], config.vocabulary["size"],
                    f"project {path}")
        project = cls(path, config, vocab, mmap=mmap, runtime=runtime)
        if (path / MODEL_DIR).exists():
            project.recipe = project._load_model()
        project.load_seconds = time.perf_counter() - start
        return project._served(serving)

    def _load_model(self) -> Recipe:
        # read before the model: a folder replaced meanwhile shows the older version, and
        # a reload (`tagalign.serve.reload`) then sees a change and loads again
        self.model_version = model_version(self.path)
        return Recipe.load(self.path / MODEL_DIR, self.vocab, mmap=self.mmap,
                           runtime=self.runtime)

    # -- training ----------------------------------------------------------------------
    @property
    def is_trained(self) -> bool:
        """The one definition of "trained": a model is loaded (``model/`` is written
        atomically, so a folder holds one only once training finished)."""
        return self.recipe is not None

    def trained_recipe(self) -> Recipe:
        """The trained recipe; `NotTrainedError` (the one message) when there is none."""
        if self.recipe is None:
            raise NotTrainedError(f"project {self.path}")
        return self.recipe

    @staticmethod
    def check_trained_folder(path: Path | str) -> None:
        """`trained_recipe`'s check for a folder not loaded here (a batch run loads the
        project in its workers): `NotAProjectError` or `NotTrainedError`."""
        path = Path(path)
        require_project(path)
        if not (path / MODEL_DIR).exists():
            raise NotTrainedError(f"project {path}")

    @property
    def params(self) -> dict[str, Any]:
        """The recipe's parameters: those asked for and not trained yet (the given ones:
        `create`, `draft`), else the trained model's (its manifest holds the one copy; every
        parameter)."""
        if self.config.params is None and self.recipe is not None:
            return dict(self.recipe.params)
        return saved_params(self.path, self.config)

    def new_recipe(self) -> Recipe:
        """An untrained recipe with the project's `params` (a retrained model keeps the
        values ``set_params`` tuned)."""
        return get_recipe(self.recipe_name)(self.vocab, **self.params)

    @property
    def recipe_name(self) -> str:
        """The recipe the project trains (`InputError` for a projects file's draft that
        names none yet: served untrained, never trained)."""
        if self.config.recipe is None:
            raise InputError(f"project {self.path} names no recipe")
        return self.config.recipe

    def train(self, records: Sequence[Record], resume: bool = True) -> Recipe:
        """Fit the configured recipe and save it atomically into ``model/``.

        Finished phases are kept in ``work/``; with ``resume`` a rerun skips them.
        """
        work = self.path / WORK_DIR
        if not resume and work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True, exist_ok=True)
        recipe = self.new_recipe()
        recipe.set_runtime(self.runtime)
        try:
            recipe.fit(records, workdir=work)
            self.save_model(recipe)
        except NoSpaceError as exc:  # the model before is kept (`Recipe.save`: atomic)
            raise NoSpaceError.of(exc, rerun=f"rerun: the phases finished so far are kept "
                                  f"in {work} and reused") from exc
        shutil.rmtree(work, ignore_errors=True)
        return recipe

    def save_model(self, recipe: Recipe) -> None:
        """``recipe`` (trained) into ``model/``; from then on its manifest holds the
        parameters, and the config only what is not one."""
        recipe.save(self.path / MODEL_DIR)  # the project's vocabulary: `new_recipe`
        self.recipe = recipe
        self.model_version = model_version(self.path)
        self.config.drop_params()
        self.config.trained_at = _now()
        self.config.versions = versions()
        self._write_config()

    def _write_config(self) -> None:
        """``project.json``, atomically (every change of the config goes through here)."""
        write_json_atomic(self.path / CONFIG_NAME, self.config.to_json())

    def check_learn_allowed(self) -> None:
        """Raise `LearningNotAllowedError` unless ``allow_learn`` is set (the REST APIs ask
        before storing anything, as Annif does)."""
        if not self.allow_learn:
            raise LearningNotAllowedError(
                f"Learning not allowed for this project ({self.path.name}): set allow_learn "
                "= true in the projects file or serve it with --allow-learn")

    def check_learnable(self) -> None:
        """Raise `ReadOnlyError` for a project loaded with ``mmap`` (before anything of a
        learn request is stored, so a refused request leaves no trace)."""
        if self.mmap:
            raise ReadOnlyError(read_only_message(f"project {self.path.name}"))

    def learn(self, records: Sequence[Record]) -> bool:
        """Confirmed records for a recipe that learns online; False when it does not (they
        are still worth storing for the next `tagalign train`)."""
        self.check_learnable()
        if not self.is_trained:
            return False
        try:
            self.trained_recipe().learn(records)
        except NotImplementedError:
            return False
        return True

    def set_scores(self, scores: dict[str, Any]) -> None:
        """Record dev scores (shown by `tagalign serve` and `GET /v1/projects/{id}`)."""
        self.config.dev_scores = scores
        self._write_config()

    # -- tuning ------------------------------------------------------------------------
    def defaults(self, language: str | None = None, fallback_limit: int = DEFAULT_LIMIT
                 ) -> tuple[int, float]:
        """``(limit, threshold)`` a request without them gets: the projects file's
        (`tagalign.projects_file`), else the language's saved values (``optimize
        --per-language --save``), else the project's, else ``fallback_limit`` and 0.0."""
        limit, threshold = self.config.defaults(language, fallback_limit)
        return (self.limit if self.limit is not None else limit,
                self.threshold if self.threshold is not None else threshold)

    @staticmethod
    def read_config(path: Path | str) -> ProjectConfig:
        """A project's ``project.json`` alone (no vocabulary, no model: cheap), migrated
        (`read_project_config`); its parameters: `read_params`."""
        return read_project_config(path)

    @staticmethod
    def read_params(path: Path | str) -> dict[str, Any]:
        """The recipe parameters of the project at ``path`` without loading it (`params`)."""
        return saved_params(path, Project.read_config(path))

    def set_defaults(self, limit: int, threshold: float, language: str | None = None) -> None:
        """Save the limit/threshold that `suggest` and both REST APIs use when a request
        gives none (for one language only with ``language``); written atomically."""
        self.config.set_defaults(limit, threshold, language)
        self._write_config()

    def set_params(self, updates: dict[str, Any]) -> None:
        """Change recipe parameters of a trained project that need no retraining (tuned by
        ``tagalign hyperopt --save``): written into the model's manifest (their one copy,
        atomically), their names into the config (``tuned_params``), then the model is reloaded so
        it uses them."""
        recipe = self.trained_recipe()
        self.check_learnable()
        type(recipe)(self.vocab, **{**recipe.params, **updates})  # checked before a write
        recipe.update_params(self.path / MODEL_DIR, updates)
        self.config.tuned_params = sorted(set(self.config.tuned_params) | set(updates))
        self._write_config()
        self.recipe = self._load_model()
        self.recipe.params_saved(self.path / MODEL_DIR)

    # -- suggesting (`tagalign.project.Tagger`) ----------------------------------------
    @property
    def excluded(self) -> frozenset[str]:
        """Subject ids the project's rules exclude (computed once per rules object)."""
        if self._excluded is None or self._excluded[0] is not self.rules:
            self._excluded = (self.rules, self.rules.excluded(self.vocab))
        return self._excluded[1]

    def info(self) -> dict[str, Any]:
        """The project as the REST APIs and ``tagalign projects`` describe it."""
        return project_info(self)
