"""A `Project`: one folder holding a vocabulary, a recipe's config and its trained model.

Layout::

    PROJECT/project.json   name, recipe, params, vocabulary fingerprint, versions, scores
    PROJECT/vocab.json.gz  the vocabulary, saved once (fast load)
    PROJECT/model/         the trained recipe (written atomically; safetensors/JSON/npy)
    PROJECT/work/          finished training phases, so an interrupted train resumes

The CLI, the REST API and the benchmarks are thin layers over this class.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tagalign.io import atomic_dir, read_json, versions, write_json_atomic
from tagalign.recipes import ReadOnlyError, Recipe, get_recipe, read_only_message
from tagalign.records import EMPTY_WARNING, Record, check_record
from tagalign.suggest import Suggestion, Tagged
from tagalign.vocab import Vocabulary

CONFIG_NAME = "project.json"
MODEL_DIR = "model"
WORK_DIR = "work"
DEFAULT_RECIPE = "hybrid"


class ProjectError(RuntimeError):
    """A project folder is missing, incomplete or inconsistent."""


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class Project:
    def __init__(self, path: Path, config: dict[str, Any], vocab: Vocabulary,
                 recipe: Recipe | None = None, mmap: bool = False):
        self.path = Path(path)
        self.config = config
        self.vocab = vocab
        self.recipe = recipe
        #: loaded memory-mapped: suggests as usual, never learns (`learn` refuses)
        self.mmap = mmap

    # -- creation and loading ----------------------------------------------------------
    @classmethod
    def create(cls, path: Path | str, vocab: Vocabulary, recipe: str = DEFAULT_RECIPE,
               params: dict[str, Any] | None = None, name: str | None = None,
               overwrite: bool = False) -> Project:
        """Start a project folder (vocabulary saved once, config written atomically)."""
        path = Path(path)
        recipe_cls = get_recipe(recipe)
        recipe_cls(vocab, **(params or {}))  # validates parameter names now, not after hours
        if (path / CONFIG_NAME).exists() and not overwrite:
            old = read_json(path / CONFIG_NAME)
            if old.get("recipe") == recipe and old.get("params", {}) == (params or {}):
                vocab.check(old["vocabulary"]["fingerprint"], old["vocabulary"]["size"],
                            f"project {path}")
                return cls(path, old, vocab)
            raise ProjectError(f"{path} already holds a project with recipe "
                               f"{old.get('recipe')!r}; use --overwrite to replace it")
        path.mkdir(parents=True, exist_ok=True)
        vocab.save(path)
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
        write_json_atomic(path / CONFIG_NAME, config)
        return cls(path, config, vocab)

    @classmethod
    def load(cls, path: Path | str, vocab: Vocabulary | None = None, *,
             mmap: bool = False) -> Project:
        """Load a trained (or just created) project; refuses a mismatched vocabulary.

        ``mmap``: the recipe maps its large arrays (the hybrid: its vector indexes, record
        matrices and label lists) from the files instead of reading them into memory — less
        memory, shared by processes on one machine, the first queries read from disk — and
        the project is read-only: `learn` raises `ReadOnlyError`."""
        path = Path(path)
        cfg_path = path / CONFIG_NAME
        if not cfg_path.exists():
            raise ProjectError(f"{path} is not a tagalign project (no {CONFIG_NAME}); "
                               "create one with `tagalign train`")
        config = read_json(cfg_path)
        if vocab is None:
            vocab = Vocabulary.load(path)
        vocab.check(config["vocabulary"]["fingerprint"], config["vocabulary"]["size"],
                    f"project {path}")
        project = cls(path, config, vocab, mmap=mmap)
        if (path / MODEL_DIR).exists():
            project.recipe = project._load_model()
        return project

    def _load_model(self) -> Recipe:
        model = self.path / MODEL_DIR
        meta = read_json(model / "recipe.json")
        self.vocab.check(meta["vocabulary"]["fingerprint"], meta["vocabulary"]["size"],
                         f"model {model}")
        recipe_cls = get_recipe(meta["recipe"])
        if self.mmap:  # only then: recipes registered by others may predate the keyword
            return recipe_cls.load(model, self.vocab, meta["params"], mmap=True)
        return recipe_cls.load(model, self.vocab, meta["params"])

    # -- training ----------------------------------------------------------------------
    @property
    def is_trained(self) -> bool:
        return self.recipe is not None and self.config.get("trained_at") is not None

    def new_recipe(self) -> Recipe:
        return get_recipe(self.config["recipe"])(self.vocab, **self.config["params"])

    def train(self, records: Sequence[Record], dev: Sequence[Record] | None = None,
              resume: bool = True) -> Recipe:
        """Fit the configured recipe and save it atomically into ``model/``.

        Finished phases are kept in ``work/``; with ``resume`` a rerun skips them.
        """
        work = self.path / WORK_DIR
        if not resume and work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True, exist_ok=True)
        recipe = self.new_recipe()
        recipe.fit(records, workdir=work, dev=dev)
        self.save_model(recipe)
        shutil.rmtree(work, ignore_errors=True)
        return recipe

    def save_model(self, recipe: Recipe) -> None:
        with atomic_dir(self.path / MODEL_DIR) as tmp:
            recipe.save(tmp)
            write_json_atomic(tmp / "recipe.json", {
                "recipe": recipe.name,
                "params": recipe.params,
                "vocabulary": {"size": len(self.vocab), "fingerprint": self.vocab.fingerprint},
                "versions": versions(),
                "saved": _now(),
            })
        self.recipe = recipe
        self.config["trained_at"] = _now()
        self.config["versions"] = versions()
        write_json_atomic(self.path / CONFIG_NAME, self.config)

    def check_learnable(self) -> None:
        """Raise `ReadOnlyError` for a project loaded with ``mmap`` (before anything of a
        learn request is stored, so a refused request leaves no trace)."""
        if self.mmap:
            raise ReadOnlyError(read_only_message(f"project {self.path.name}"))

    def learn(self, records: Sequence[Record]) -> bool:
        """Confirmed records for a recipe that learns online; False when it does not (they
        are still worth storing for the next `tagalign train`)."""
        self.check_learnable()
        if self.recipe is None:
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

    # -- suggesting --------------------------------------------------------------------
    def suggest(self, records: Sequence[Record], limit: int = 20,
                threshold: float = 0.0) -> list[list[Suggestion]]:
        """Ranked suggestions per record (none for a record without text; see
        `suggest_with_warnings` for the reasons)."""
        return [row for row, _ in self.suggest_with_warnings(records, limit, threshold)]

    def suggest_with_warnings(self, records: Sequence[Record], limit: int = 20,
                              threshold: float = 0.0
                              ) -> list[tuple[list[Suggestion], str | None]]:
        """``(suggestions, warning)`` per record (see `tag`)."""
        return [(t.suggestions, t.warning) for t in self.tag(records, limit, threshold)]

    def tag(self, records: Sequence[Record], limit: int = 20, threshold: float = 0.0
            ) -> list[Tagged]:
        """Suggestions, warning and quality estimate per record. Degenerate records never
        reach the recipe as they are (`tagalign.records.check_record`): empty text gets no
        suggestions, no quality and `EMPTY_WARNING`; text over `MAX_TEXT_CHARS` is cut,
        with a warning saying so. The quality is None when the recipe has no estimator."""
        if self.recipe is None:
            raise ProjectError(f"project {self.path} is not trained yet; run `tagalign train`")
        checked = [check_record(r) for r in records]
        out = [Tagged([], warning) for _, warning in checked]
        todo = [i for i, (_, warning) in enumerate(checked) if warning != EMPTY_WARNING]
        if todo:
            rows = self.recipe.suggest_with_quality([checked[i][0] for i in todo], limit=limit,
                                                    threshold=threshold)
            for i, (row, quality) in zip(todo, rows, strict=True):
                out[i].suggestions, out[i].quality = row, quality
        return out

    def info(self) -> dict[str, Any]:
        c = self.config
        return {
            "id": self.path.name,
            "name": c.get("name"),
            "recipe": c.get("recipe"),
            "vocabulary_size": c["vocabulary"]["size"],
            "languages": c["vocabulary"].get("languages", []),
            "trained_at": c.get("trained_at"),
            "dev_scores": c.get("dev_scores"),
            "read_only": self.mmap,
        }
