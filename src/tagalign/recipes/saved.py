"""A trained recipe's folder (``PROJECT/model/``): the recipe's own files and its manifest
``recipe.json`` (recipe name, parameters, vocabulary fingerprint, package versions, the
model format, when it was saved and a random id of this save), written atomically and read
back without pickle.

The model format is checked on load, with one message for a model this version cannot read
(as scikit-learn's ``InconsistentVersionWarning``): retrain, or use the tagalign that
saved it.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from pathlib import Path

from tagalign.errors import ModelFormatError
from tagalign.io import atomic_dir, read_json, versions, write_json_atomic
from tagalign.recipes.base import Recipe, get_recipe
from tagalign.runtime import Runtime
from tagalign.vocab import Vocabulary

MANIFEST = "recipe.json"
#: the format `save_recipe` writes (``format`` in the manifest); a manifest without the key
#: is format 1 (saved before it existed, the same files); `READ_FORMATS` load, others are
#: refused with the message to retrain
MODEL_FORMAT = 2
READ_FORMATS = (1, 2)


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def save_recipe(recipe: Recipe, folder: Path, vocab: Vocabulary) -> None:
    """The trained ``recipe`` and its manifest into ``folder``, replaced atomically."""
    with atomic_dir(folder) as tmp:
        recipe.save(tmp)
        write_json_atomic(tmp / MANIFEST, {
            "format": MODEL_FORMAT,
            "recipe": recipe.name,
            "params": recipe.params,
            "vocabulary": {"size": len(vocab), "fingerprint": vocab.fingerprint},
            "versions": versions(),
            "saved": now(),
            # new with every save: two models saved in the same second with the same
            # parameters still have different manifests, hence versions
            # (`tagalign.project.model_version`, which a server's reload compares)
            "id": uuid.uuid4().hex,
        })


def load_recipe(folder: Path, vocab: Vocabulary, *, mmap: bool = False,
                runtime: Runtime | None = None) -> Recipe:
    """The recipe saved in ``folder``; refuses another vocabulary (`VocabularyMismatchError`)
    and a model this version cannot read (`ModelFormatError`, saying to retrain)."""
    meta = read_json(folder / MANIFEST)
    vocab.check(meta["vocabulary"]["fingerprint"], meta["vocabulary"]["size"],
                f"model {folder}")
    fmt = meta.get("format", 1)
    if fmt not in READ_FORMATS:
        saved_by = meta.get("versions", {}).get("tagalign", "another version")
        raise ModelFormatError(
            f"model {folder} was saved by tagalign {saved_by} in model format {fmt}; this "
            f"version ({versions().get('tagalign')}) reads formats "
            f"{', '.join(map(str, READ_FORMATS))}: retrain the project (tagalign train) or "
            "use the tagalign that saved it")
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
