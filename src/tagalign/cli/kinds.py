"""Every kind of saved folder, known: the CLI sits above all packages that save one.

`tagalign.io.kinds` knows none itself; the classifier and pairs packages register theirs
when imported, and the project's two folders are registered here (they belong beside
`tagalign.project`, which writes them).
"""

from __future__ import annotations

from pathlib import Path

from tagalign.io.kinds import register_kind
from tagalign.io.kinds import wrong_model_message as _wrong_model_message
from tagalign.project import CONFIG_NAME, MODEL_DIR

register_kind("project", "a subject-tagging project, read by `tagalign suggest`",
              lambda folder: (folder / CONFIG_NAME).is_file())
register_kind("recipe", f"the {MODEL_DIR} folder of a subject-tagging project (give "
              "`tagalign suggest` the project folder above it)",
              lambda folder: (folder / "recipe.json").is_file())


def wrong_model_message(folder: Path, want: str) -> str | None:
    """`tagalign.io.wrong_model_message` once every package has registered its kind."""
    import tagalign.classify  # noqa: F401 - registers "classifier" (imports torch: here only)
    import tagalign.pairs.model  # noqa: F401 - registers "pairs"

    return _wrong_model_message(folder, want)
