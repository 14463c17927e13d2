"""What a `Project` says of itself (`Project.info`): the REST APIs' project description
and ``tagalign projects``' table, from its config, its model and how it is served."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagalign.project.folder import Project


def project_info(project: Project) -> dict[str, Any]:
    """The project's id, name, recipe, vocabulary, training, model version, dev scores,
    request defaults and serving settings (in the order clients have them)."""
    c = project.config
    return {
        "id": project.path.name,
        "name": project.name,
        "recipe": c.recipe,
        # headings that can be suggested (an updated vocabulary keeps its retired ones)
        "vocabulary_size": project.vocab.n_suggestable,
        # the change files applied since training (`tagalign vocab update`), if any
        "vocabulary_state": c.vocabulary.get("state"),
        "languages": c.vocabulary.get("languages", []),
        "language": project.language or (c.vocabulary.get("languages") or [None])[0],
        "trained": project.is_trained,
        "trained_at": c.trained_at,
        "model_version": dict(project.model_version)
        if project.model_version and project.model_version["version"] else None,
        "dev_scores": c.dev_scores,
        # what a request without them gets (projects file, else saved; per-language
        # values, if any, override these)
        "limit": project.limit if project.limit is not None else c.limit,
        "threshold": project.threshold if project.threshold is not None else c.threshold,
        "read_only": project.mmap,
        "allow_learn": project.allow_learn,
        "rules": project.rules.describe(),
        "excluded": len(project.excluded),
    }
