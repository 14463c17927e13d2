"""A trained recipe's folder (``PROJECT/model/``): the recipe's own files and its manifest
``recipe.json``, the manifest of every model family (`tagalign.model_files.ModelFamily`:
model format, recipe name, parameters, package versions) with the vocabulary fingerprint,
when it was saved and a random id of this save; written atomically by `Recipe.save` and
read back without pickle by `Recipe.load`.

The model format is checked on load (`ModelFamily.check_format`), with the families' one
message for a model this version cannot read: retrain, or use the tagalign that saved it.
"""

from __future__ import annotations

from tagalign.model_files import now  # noqa: F401 - re-exported
from tagalign.recipes.base import Recipe

MANIFEST = Recipe.manifest_name
#: the format `Recipe.save` writes (``format`` in the manifest); a manifest without the key
#: is format 1 (saved before it existed, the same files); `READ_FORMATS` load, others are
#: refused with the message to retrain
MODEL_FORMAT = Recipe.model_format
READ_FORMATS = Recipe.read_formats
