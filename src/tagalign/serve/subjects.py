"""Subject search for the web page's "add a subject" box: any subject of the project's
vocabulary by label prefix, in either language (`tagalign.vocab.prefix.PrefixIndex`).

``GET /tagalign/v1/projects/{id}/subjects?prefix=holzs&limit=10``
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from fastapi import APIRouter, HTTPException, Query

from tagalign.project import Project
from tagalign.serve import schemas as s

GND_URI = "https://d-nb.info/gnd/"


def get_project(projects: Mapping[str, Project], project_id: str) -> Project:
    """The served project ``project_id``, or 404 naming the known ones."""
    if project_id not in projects:
        raise HTTPException(404, f"project {project_id!r} not found; "
                                 f"known: {', '.join(sorted(projects))}")
    return projects[project_id]


def warm(projects: Mapping[str, Project]) -> threading.Thread:
    """Build each vocabulary's prefix index in the background (~2 s for the 205k GND
    subjects), so the first keystroke in the search box does not wait for it."""
    thread = threading.Thread(target=lambda: [p.vocab.prefix_index for p in projects.values()],
                              name="prefix-index", daemon=True)
    thread.start()
    return thread


def create_router(projects: Mapping[str, Project], prefix: str) -> APIRouter:
    router = APIRouter(prefix=prefix)

    @router.get("/projects/{project_id}/subjects", response_model=s.SubjectsOut,
                responses={404: {"model": s.ErrorOut, "description": "Unknown project"}})
    def subjects(project_id: str,
                 prefix: str = Query(..., min_length=1, max_length=200,
                                     description="Start of a label, any case, either "
                                                 "language (preferred or alternate)."),
                 limit: int = Query(10, ge=1, le=100, description="Most subjects to return."),
                 ) -> s.SubjectsOut:
        """Subjects of the project's vocabulary whose label starts with ``prefix``: an exact
        match first, then longer labels alphabetically; each subject once."""
        vocab = get_project(projects, project_id).vocab
        return s.SubjectsOut(subjects=[
            s.SubjectOut(id=m.subject.id, label=m.subject.label(m.language),
                         matched=m.label, language=m.language,
                         labels=dict(m.subject.labels), uri=GND_URI + m.subject.id)
            for m in vocab.prefix_index.search(prefix, limit)])

    return router


__all__ = ["GND_URI", "create_router", "get_project", "warm"]
