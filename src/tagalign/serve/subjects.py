"""Subject search for the web page's "add a subject" box: any subject of the project's
vocabulary by label prefix, in either language (`tagalign.vocab.prefix.PrefixIndex`).

``GET /tagalign/v1/projects/{id}/subjects?prefix=holzs&limit=10``
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from fastapi import APIRouter, Query

from tagalign.project import Project
from tagalign.serve import API
from tagalign.serve import schemas as s
from tagalign.serve.depends import ProjectDep
from tagalign.serve.service import subject_uri


def warm(projects: Mapping[str, Project]) -> threading.Thread:
    """Build each vocabulary's prefix index in the background (~2 s for the 205k GND
    subjects), so the first keystroke in the search box does not wait for it."""
    thread = threading.Thread(target=lambda: [p.vocab.prefix_index for p in projects.values()],
                              name="prefix-index", daemon=True)
    thread.start()
    return thread


router = APIRouter(prefix=API)


@router.get("/projects/{project_id}/subjects", response_model=s.SubjectsOut,
            responses={404: {"model": s.ErrorOut, "description": "Unknown project"}})
def subjects(project: ProjectDep,
             prefix: str = Query(..., min_length=1, max_length=200,
                                 description="Start of a label, any case, either "
                                             "language (preferred or alternate)."),
             limit: int = Query(10, ge=1, le=100, description="Most subjects to return."),
             ) -> s.SubjectsOut:
    """Subjects of the project's vocabulary whose label starts with ``prefix``: an exact
    match first, then longer labels alphabetically; each subject once."""
    vocab = project.served.project.vocab
    return s.SubjectsOut(subjects=[
        s.SubjectOut(id=m.subject.id, label=m.subject.label(m.language),
                     matched=m.label, language=m.language,
                     labels=dict(m.subject.labels), uri=subject_uri(m.subject.id))
        for m in vocab.prefix_index.search(prefix, limit)])


__all__ = ["router", "warm"]
