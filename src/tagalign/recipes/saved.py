"""A trained recipe's folder (``PROJECT/model/``): the recipe's own files and its manifest
``recipe.json``, the manifest of every model family (`tagalign.model_files.ModelFamily`:
model format, recipe name, parameters, package versions) with the vocabulary fingerprint,
when it was saved and a random id of this save; written atomically and read back without
pickle.

The model format is checked on load (`ModelFamily.check_format`), with the families' one
message for a model this version cannot read: retrain, or use the tagalign that saved it.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from pathlib import Path

from tagalign.errors import ModelFormatError
from tagalign.io import atomic_dir, read_json, write_json_atomic
from tagalign.recipes.base import Recipe, get_recipe
from tagalign.runtime import Runtime
from tagalign.vocab import Vocabulary

MANIFEST = Recipe.manifest_name
#: the format `save_recipe` writes (``format`` in the manifest); a manifest without the key
#: is format 1 (saved before it existed, the same files); `READ_FORMATS` load, others are
#: refused with the message to retrain
MODEL_FORMAT = Recipe.model_format
READ_FORMATS = Recipe.read_formats


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def save_recipe(recipe: Recipe, folder: Path, vocab: Vocabulary) -> None:
    """The trained ``recipe`` and its manifest into ``folder``, replaced atomically."""
    with atomic_dir(folder) as tmp:
        recipe.save(tmp)
        recipe.write_manifest(
            tmp, recipe.params,
            vocabulary={"size": len(vocab), "fingerprint": vocab.fingerprint},
            saved=now(),
            # new with every save: two models saved in the same second with the same
            # parameters still have different manifests, hence versions
            # (`tagalign.project.model_version`, which a server's reload compares)
            id=uuid.uuid4().hex)


def load_recipe(folder: Path, vocab: Vocabulary, *, mmap: bool = False,
                runtime: Runtime | None = None) -> Recipe:
    """The recipe saved in ``folder``; refuses another vocabulary (`VocabularyMismatchError`)
    and a model this version cannot read (`ModelFormatError`, saying to retrain)."""
    meta = read_json(folder / MANIFEST)
    vocab.check(meta["vocabulary"]["fingerprint"], meta["vocabulary"]["size"],
                f"model {folder}")
    Recipe.check_format(meta, folder)
    recipe_cls = get_recipe(meta["recipe"])
    try:
        if mmap:  # only then: recipes registered by others may predate the keyword
            recipe = recipe_cls.load(folder, vocab, meta["params"], mmap=True)
        else:
            recipe = recipe_cls.load(folder, vocab, meta["params"])
    except (OSError, KeyError, TypeError) as exc:
        raise ModelFormatError(
            f"model {folder} is incomplete or was saved by an older tagalign "
            f"({type(exc).__name__}: {exc}): retrain the project (tagalign train)") from exc
    recipe.set_runtime(runtime or Runtime())
    return recipe


def update_params(folder: Path, updates: dict) -> None:
    """Parameters changed after training (no retraining needed) into the manifest."""
    meta = read_json(folder / MANIFEST)
    meta["params"] = {**meta["params"], **updates}
    write_json_atomic(folder / MANIFEST, meta)
