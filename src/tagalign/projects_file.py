"""A projects file (``projects.toml``): several projects declared in one place, as Annif's
``projects.toml`` declares them, so one server runs them all.

One table per project; the table name is the project id (in every URL)::

    [gnd-hybrid]
    name = "GND hybrid"
    recipe = "hybrid"
    vocab = "gnd-subjects.tsv.gz"    # the vocabulary the project is (or will be) trained on
    language = "de"                  # label language of /v1 results (default: vocabulary's)
    path = "projects/gnd-hybrid"     # the trained folder (default: the id, beside this file)
    params = { ranker_rounds = 200 }
    limit = 10                       # defaults of suggest requests that give none
    threshold = 0.0
    allow_learn = true               # learning through the REST APIs (default false)
    exclude = ["4015065-3"]          # vocabulary rules: ids/URIs, "*", or a file of ids
    include = "keep.txt"
    feedback_db = "postgresql://…"   # feedback store: a URL or an SQLite file (default:
                                     # feedback.sqlite in the project's folder)
    domains = "domains-stack"        # a domain model trained on this project (`tagalign
                                     # classify train --subjects-project`): /tagalign/v1
                                     # answers and the page give each record's domains too

Settings of the server rather than of one project are keys above the first table::

    tokens_file = "tokens.toml"      # API tokens: writes need one (`tagalign tokens add`)

Relative paths are read from the file's folder. Every error names the file, the table and
the key. Nothing here is saved into the project folders: the file is the configuration
of a deployment, the folder the trained model.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagalign.errors import InputError, NotFoundError, TagalignError
from tagalign.project import CONFIG_NAME, DEFAULT_RECIPE, Project, ProjectError
from tagalign.project.config import saved_params
from tagalign.project.serving import ServingSettingError, ServingSettings
from tagalign.recipes import get_recipe, recipe_names
from tagalign.runtime import Runtime
from tagalign.vocab import Vocabulary, VocabularyMismatchError, load_vocabulary
from tagalign.vocab.rules import ALL, SubjectRules, read_id_file

KEYS = ("name", "recipe", "vocab", "language", "path", "params", "limit", "threshold",
        "allow_learn", "exclude", "include", "feedback_db", "domains")
#: keys of the whole server, written above the first table (`read_server_keys`)
SERVER_KEYS = ("tokens_file",)


class ProjectsFileError(InputError):
    """The projects file is unreadable, or one of its tables is wrong."""


@dataclass
class ProjectSpec:
    """One table of a projects file (paths resolved against the file's folder): what the
    folder is (``recipe``, ``vocab``, ``params``) and how it is served (``serving``, the
    keys `ServingSettings` holds)."""

    id: str
    source: Path
    path: Path
    recipe: str | None = None
    vocab: Path | None = None
    params: dict[str, Any] | None = None
    serving: ServingSettings = field(default_factory=ServingSettings)

    def where(self, key: str | None = None) -> str:
        """``projects.toml [id] key``: where an error's value is written."""
        return f"{self.source} [{self.id}]" + (f" {key}" if key else "")

    @property
    def trained_folder(self) -> bool:
        return (self.path / CONFIG_NAME).exists()


def read_text(path: Path) -> str:
    """The projects file's text (`ProjectsFileError` when it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProjectsFileError(f"projects file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProjectsFileError(f"{path}: not a readable TOML file ({exc})") from None


def _load(path: Path, text: str | None = None) -> dict[str, Any]:
    try:
        return tomllib.loads(read_text(path) if text is None else text)
    except tomllib.TOMLDecodeError as exc:
        raise ProjectsFileError(f"{path}: not a readable TOML file ({exc})") from None


def read_projects(path: Path | str, text: str | None = None) -> dict[str, ProjectSpec]:
    """The projects of ``path``, in file order; ``text``: the file's text as read before
    (a server reads it once, at start: `tagalign.serve.settings.ServerSettings`), relative
    paths still resolved against ``path``'s folder."""
    path = Path(path)
    data = _load(path, text)
    out = {}
    for pid, table in data.items():
        if pid in SERVER_KEYS and not isinstance(table, dict):
            continue  # a setting of the server (`read_server_keys`)
        if not isinstance(table, dict):
            close = difflib.get_close_matches(pid, SERVER_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ProjectsFileError(f"{path}: {pid!r} is not a table{hint}; write [{pid}] "
                                    "above its keys")
        out[pid] = _spec(path, pid, table)
    if not out:
        raise ProjectsFileError(f"{path}: no projects (one [table] per project)")
    return out


def read_project(path: Path | str, project_id: str) -> ProjectSpec:
    """The project ``project_id`` of the projects file ``path`` (`NotFoundError` naming
    the known ones when it has none of that id)."""
    specs = read_projects(path)
    if project_id not in specs:
        raise NotFoundError(f"{path}: no project {project_id!r}; known: {', '.join(specs)}")
    return specs[project_id]


@dataclass(frozen=True)
class ServerKeys:
    """The projects file's keys of the whole server (`SERVER_KEYS`), paths resolved; the
    server process's other settings are `tagalign.serve.settings.ServerSettings`."""

    tokens_file: Path | None = None


def read_server_keys(path: Path | str) -> ServerKeys:
    """The server's settings in ``path`` (relative paths: from the file's folder)."""
    path = Path(path)
    value = _load(path).get("tokens_file")
    if value is None or isinstance(value, dict):  # a table: a project named so
        return ServerKeys()
    if not isinstance(value, str) or not value:
        raise ProjectsFileError(f"{path} tokens_file: expected the name of a tokens file, "
                                f"got {value!r}")
    return ServerKeys(tokens_file=path.parent / value)


def select(specs: dict[str, ProjectSpec], only: list[str] | None,
           source: Path | str) -> dict[str, ProjectSpec]:
    """The projects named in ``only`` (all when empty); an unknown id is an error."""
    if not only:
        return specs
    unknown = [pid for pid in only if pid not in specs]
    if unknown:
        raise ProjectsFileError(f"{source}: no project {', '.join(map(repr, unknown))}; "
                                f"known: {', '.join(specs)}")
    return {pid: specs[pid] for pid in only}


def _spec(source: Path, pid: str, table: dict[str, Any]) -> ProjectSpec:
    spec = ProjectSpec(id=pid, source=source, path=source.parent / pid)
    for key in table:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ProjectsFileError(f"{spec.where(key)}: unknown key{hint}; known keys: "
                                    f"{', '.join(KEYS)}")

    def get(key: str, kinds: type | tuple[type, ...], what: str) -> Any:
        value = table.get(key)
        # TOML booleans are ints to isinstance: never accept one for a number
        if value is not None and (not isinstance(value, kinds) or
                                  (isinstance(value, bool) and bool not in _tuple(kinds))):
            raise ProjectsFileError(f"{spec.where(key)}: expected {what}, got {value!r}")
        return value

    name = get("name", str, "a string")
    spec.recipe = get("recipe", str, "a string")
    if spec.recipe is not None and spec.recipe not in recipe_names():
        raise ProjectsFileError(f"{spec.where('recipe')}: unknown recipe {spec.recipe!r}; "
                                f"one of: {', '.join(recipe_names())}")
    language = get("language", str, "a language code")
    spec.params = get("params", dict, "a table of recipe parameters")
    if (value := get("vocab", str, "a vocabulary file")) is not None:
        spec.vocab = source.parent / value
    if (value := get("path", str, "a folder")) is not None:
        spec.path = source.parent / value
    limit = get("limit", int, "a whole number")
    if limit is not None and limit < 1:
        raise ProjectsFileError(f"{spec.where('limit')}: must be at least 1")
    threshold = get("threshold", (int, float), "a number between 0 and 1")
    if threshold is not None and not 0 <= threshold <= 1:
        raise ProjectsFileError(f"{spec.where('threshold')}: must be between 0 and 1")
    allow_learn = bool(get("allow_learn", bool, "true or false"))
    rules = SubjectRules(_ids(spec, table, "exclude"), _ids(spec, table, "include"))
    feedback_db = get("feedback_db", str, "an SQLAlchemy URL or an SQLite file")
    if feedback_db is not None and "://" not in feedback_db:
        feedback_db = f"sqlite:///{(source.parent / feedback_db).resolve()}"
    domains = get("domains", str, "a domain model folder")
    spec.serving = ServingSettings(
        name=name, language=language, limit=limit,
        threshold=None if threshold is None else float(threshold), allow_learn=allow_learn,
        rules=rules, feedback_db=feedback_db,
        domain_model=None if domains is None else source.parent / domains)
    return spec


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _ids(spec: ProjectSpec, table: dict[str, Any], key: str) -> tuple[str, ...]:
    """A rule's value: a list of ids or URIs, ``"*"`` (exclude only) or a file of ids."""
    value = table.get(key)
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if ALL in value and key == "include":
            raise ProjectsFileError(f"{spec.where(key)}: '*' only makes sense in exclude")
        return tuple(value)
    if value == ALL:
        if key == "include":
            raise ProjectsFileError(f"{spec.where(key)}: '*' only makes sense in exclude")
        return (ALL,)
    if isinstance(value, str):
        file = spec.source.parent / value
        try:
            return tuple(read_id_file(file, "the id file"))
        except TagalignError as exc:
            raise ProjectsFileError(f"{spec.where(key)}: {exc}") from None
    raise ProjectsFileError(f"{spec.where(key)}: expected a list of subject ids, \"*\" or "
                            f"the name of a file of ids, got {value!r}")


def _vocabulary(spec: ProjectSpec) -> Vocabulary | None:
    if spec.vocab is None:
        return None
    try:
        return load_vocabulary(spec.vocab)
    except (OSError, ValueError) as exc:
        raise ProjectsFileError(f"{spec.where('vocab')}: cannot load {spec.vocab}: "
                                f"{exc}") from None


def check_saved(spec: ProjectSpec) -> None:
    """Refuse a folder saved with another recipe or other parameters than the table's."""
    saved = Project.read_config(spec.path)
    if spec.recipe is not None and saved.recipe != spec.recipe:
        raise ProjectsFileError(
            f"{spec.where('recipe')}: {spec.recipe!r}, but the project at {spec.path} was "
            f"created with {saved.recipe!r}; fix the file or retrain into another path")
    if spec.params is not None:
        other = get_recipe(str(saved.recipe)).differing_params(saved_params(spec.path, saved),
                                                               spec.params)
        if other:
            raise ProjectsFileError(
                f"{spec.where('params')}: {spec.params}, but the project at {spec.path} was "
                f"trained with {other}")


def open_project(spec: ProjectSpec, *, mmap: bool = False, runtime: Runtime | None = None
                 ) -> Project:
    """The project of ``spec``, served with the table's settings.

    A folder that holds no project yet (not trained) gives an untrained `Project` —
    listed, answering 503 to suggest requests — when the table names its vocabulary."""
    vocab = _vocabulary(spec)
    if spec.trained_folder:
        check_saved(spec)
        try:
            project = Project.load(spec.path, vocab, mmap=mmap, runtime=runtime)
        except VocabularyMismatchError as exc:
            raise ProjectsFileError(f"{spec.where('vocab')}: {spec.vocab} does not match the "
                                    f"saved project: {exc}") from None
        except (ProjectError, OSError, ValueError) as exc:
            raise ProjectsFileError(f"{spec.where('path')}: {exc}") from None
    elif vocab is None:
        raise ProjectsFileError(
            f"{spec.where('path')}: no trained project at {spec.path}, and no vocab key to "
            f"serve it untrained; run `tagalign train --projects {spec.source} {spec.id}`")
    else:
        project = Project.draft(spec.path, vocab, spec.recipe, spec.params,
                                spec.serving.name or spec.id)
    return served(spec, project)


def served(spec: ProjectSpec, project: Project) -> Project:
    """``project`` served with the table's settings (checked against its vocabulary; an
    error names the table's key)."""
    try:
        return project.with_serving(spec.serving)
    except ServingSettingError as exc:
        raise ProjectsFileError(f"{spec.where(exc.key)}: {exc}") from None


def project_for_training(spec: ProjectSpec, overwrite: bool = False, *,
                         runtime: Runtime | None = None) -> Project:
    """The project `tagalign train --projects FILE ID` trains: its folder, or a new one
    created from the table's vocab, recipe and params."""
    if spec.trained_folder and not overwrite:
        return open_project(spec, runtime=runtime)
    vocab = _vocabulary(spec)
    if vocab is None:
        raise ProjectsFileError(f"{spec.where('vocab')}: needed to create the project at "
                                f"{spec.path}")
    try:
        project = Project.create(spec.path, vocab, spec.recipe or DEFAULT_RECIPE, spec.params,
                                 name=spec.serving.name or spec.id, overwrite=overwrite,
                                 runtime=runtime)
    except (ProjectError, ValueError, TypeError) as exc:
        raise ProjectsFileError(f"{spec.where()}: {exc}") from None
    return served(spec, project)


def describe(spec: ProjectSpec, project: Project | None) -> dict[str, Any]:
    """What `tagalign show-project` prints: the table and the folder's state."""
    serving = spec.serving
    out: dict[str, Any] = {
        "id": spec.id, "file": str(spec.source), "path": str(spec.path),
        "name": serving.name, "recipe": spec.recipe,
        "vocab": str(spec.vocab) if spec.vocab else None, "language": serving.language,
        "params": spec.params, "limit": serving.limit, "threshold": serving.threshold,
        "allow_learn": serving.allow_learn, "rules": serving.rules.describe(),
        "trained": bool(project and project.is_trained)}
    if project is not None:
        out["excluded"] = len(project.excluded)
        out["trained_at"] = project.config.trained_at
        out["vocabulary_size"] = project.vocab.n_suggestable  # retired ones not counted
        out["vocabulary_state"] = project.config.vocabulary.get("state")
        out["dev_scores"] = project.config.dev_scores
    return out
