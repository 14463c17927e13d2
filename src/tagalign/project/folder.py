"""A `Project`: one folder holding a vocabulary, a recipe's config and its trained model.

Layout::

    PROJECT/project.json   name, recipe, params, vocabulary fingerprint, versions, scores
    PROJECT/vocab.json.gz  the vocabulary, saved once (fast load)
    PROJECT/model/         the trained recipe (written atomically; safetensors/JSON/npy)
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
    NotTrainedError,  # also imported from here (`tagalign.serve`)
    TagalignError,
)
from tagalign.io import read_json, versions, write_json_atomic
from tagalign.project.config import (
    BY_LANGUAGE,
    CONFIG_NAME,
    DEFAULT_LIMIT,
    DEFAULT_RECIPE,
    MODEL_DIR,
    TUNED,
    WORK_DIR,
    LearningNotAllowedError,
    NotAProjectError,
    ProjectExistsError,
    _without,
    config_defaults,
)
from tagalign.project.serving import ServingSettingError, ServingSettings
from tagalign.project.version import ModelVersion, model_version
from tagalign.recipes import ReadOnlyError, Recipe, get_recipe, read_only_message
from tagalign.recipes.saved import now as _now
from tagalign.recipes.saved import update_params
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

    def __init__(self, path: Path, config: dict[str, Any], vocab: Vocabulary,
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
        return self._serving.name or self.config.get("name")

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
            old = read_json(path / CONFIG_NAME)
            # parameters tuned after training (`set_params`) are the project's own: a rerun
            # of `tagalign train` without them continues the same project
            tuned = set(old.get(TUNED, []))
            if old.get("recipe") == recipe and _without(old.get("params", {}), tuned) == \
                    _without(params or {}, tuned):
                vocab.check(old["vocabulary"]["fingerprint"], old["vocabulary"]["size"],
                            f"project {path}")
                return cls(path, old, vocab, runtime=runtime)._served(serving)
            raise ProjectExistsError(f"{path} already holds a project with recipe "
                               f"{old.get('recipe')!r}; use --overwrite to replace it")
        path.mkdir(parents=True, exist_ok=True)
        vocab.save(path)
        project = cls.draft(path, vocab, recipe, params, name, runtime=runtime)
        write_json_atomic(path / CONFIG_NAME, project.config)
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
        config = {
            "format": "tagalign-project",
            "name": name or path.name,
            "recipe": recipe,
            "params": params or {},
            "vocabulary": {"size": len(vocab), "fingerprint": vocab.fingerprint,
                           "languages": vocab.languages},
            "created": _now(),
            "trained_at": None,
            "versions": versions(),
        }
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
        cfg_path = path / CONFIG_NAME
        if not cfg_path.exists():
            raise NotAProjectError(f"{path} is not a tagalign project (no {CONFIG_NAME}); "
                               "create one with `tagalign train`")
        config = read_json(cfg_path)
        if vocab is None:
            vocab = Vocabulary.load(path)
        vocab.check(config["vocabulary"]["fingerprint"], config["vocabulary"]["size"],
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
        if not (path / CONFIG_NAME).exists():
            raise NotAProjectError(f"{path} is not a tagalign project (no {CONFIG_NAME})")
        if not (path / MODEL_DIR).exists():
            raise NotTrainedError(f"project {path}")

    def new_recipe(self) -> Recipe:
        return get_recipe(self.config["recipe"])(self.vocab, **self.config["params"])

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
        recipe.fit(records, workdir=work)
        self.save_model(recipe)
        shutil.rmtree(work, ignore_errors=True)
        return recipe

    def save_model(self, recipe: Recipe) -> None:
        recipe.save(self.path / MODEL_DIR)  # the project's vocabulary: `new_recipe`
        self.recipe = recipe
        self.model_version = model_version(self.path)
        self.config["trained_at"] = _now()
        self.config["versions"] = versions()
        write_json_atomic(self.path / CONFIG_NAME, self.config)

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
            self.recipe.learn(records)
        except NotImplementedError:
            return False
        return True

    def set_scores(self, scores: dict[str, Any]) -> None:
        """Record dev scores (shown by `tagalign serve` and `GET /v1/projects/{id}`)."""
        self.config["dev_scores"] = scores
        write_json_atomic(self.path / CONFIG_NAME, self.config)

    # -- tuning ------------------------------------------------------------------------
    def defaults(self, language: str | None = None, fallback_limit: int = DEFAULT_LIMIT
                 ) -> tuple[int, float]:
        """``(limit, threshold)`` a request without them gets: the projects file's
        (`tagalign.projects_file`), else the language's saved values (``optimize
        --per-language --save``), else the project's, else ``fallback_limit`` and 0.0."""
        limit, threshold = config_defaults(self.config, language, fallback_limit)
        return (self.limit if self.limit is not None else limit,
                self.threshold if self.threshold is not None else threshold)

    @staticmethod
    def read_config(path: Path | str) -> dict[str, Any]:
        """A project's ``project.json`` alone (no vocabulary, no model: cheap)."""
        cfg_path = Path(path) / CONFIG_NAME
        if not cfg_path.exists():
            raise NotAProjectError(f"{path} is not a tagalign project (no {CONFIG_NAME})")
        return read_json(cfg_path)

    def set_defaults(self, limit: int, threshold: float, language: str | None = None) -> None:
        """Save the limit/threshold that `suggest` and both REST APIs use when a request
        gives none (for one language only with ``language``); written atomically."""
        if limit < 1 or not 0.0 <= threshold <= 1.0:
            raise InputError(f"limit must be ≥ 1 and threshold in [0, 1], got {limit}, "
                             f"{threshold}")
        values = {"limit": int(limit), "threshold": round(float(threshold), 6)}
        if language is None:
            self.config.update(values)
        else:
            self.config.setdefault(BY_LANGUAGE, {})[language] = values
        write_json_atomic(self.path / CONFIG_NAME, self.config)

    def set_params(self, updates: dict[str, Any]) -> None:
        """Change recipe parameters of a trained project that need no retraining (tuned by
        ``tagalign hyperopt --save``): stored in the config and the model's metadata, both
        atomically, then the model is reloaded so it uses them."""
        self.trained_recipe()
        self.check_learnable()
        get_recipe(self.config["recipe"])(self.vocab, **{**self.config["params"], **updates})
        update_params(self.path / MODEL_DIR, updates)
        self.config["params"] = {**self.config["params"], **updates}
        self.config[TUNED] = sorted(set(self.config.get(TUNED, [])) | set(updates))
        write_json_atomic(self.path / CONFIG_NAME, self.config)
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
        c = self.config
        return {
            "id": self.path.name,
            "name": self.name,
            "recipe": c.get("recipe"),
            "vocabulary_size": c["vocabulary"]["size"],
            "languages": c["vocabulary"].get("languages", []),
            "language": self.language or (c["vocabulary"].get("languages") or [None])[0],
            "trained": self.is_trained,
            "trained_at": c.get("trained_at"),
            "model_version": dict(self.model_version)
            if self.model_version and self.model_version["version"] else None,
            "dev_scores": c.get("dev_scores"),
            # what a request without them gets (projects file, else saved; per-language
            # values, if any, override these)
            "limit": self.limit if self.limit is not None else c.get("limit"),
            "threshold": self.threshold if self.threshold is not None else c.get("threshold"),
            "read_only": self.mmap,
            "allow_learn": self.allow_learn,
            "rules": self.rules.describe(),
            "excluded": len(self.excluded),
        }
