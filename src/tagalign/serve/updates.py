"""What changes a served project on tagalign's own API: decisions learned (stored in the
feedback store, taught to a recipe that learns online: `Service.learn`) and a new model
from its folder (`Service.reload`).

``POST /tagalign/v1/projects/{id}/learn``, ``POST /tagalign/v1/projects/{id}/reload``
"""

from __future__ import annotations

import os

from fastapi import APIRouter

from tagalign.feedback import Decision
from tagalign.project import ModelVersion
from tagalign.records import Record
from tagalign.serve import API
from tagalign.serve import schemas as s
from tagalign.serve.depends import ProjectDep, ServiceDep

router = APIRouter(prefix=API)


@router.post("/projects/{project_id}/learn", response_model=s.LearnResponse,
             response_model_exclude_none=True, responses={
    403: {"model": s.ErrorOut,
          "description": "Learning not allowed for this project (allow_learn is off)"},
    422: {"model": s.ErrorOut,
          "description": "A subject id not in the vocabulary, or of a heading deleted or "
                         "split since (`tagalign vocab update`): nothing was stored"},
    409: {"model": s.ErrorOut,
          "description": "Project served read-only (`tagalign serve --mmap`): nothing "
                         "was stored or learned"},
    503: {"model": s.ErrorOut,
          "description": "Project not trained yet, or its feedback store's database "
                         "unavailable (with Retry-After): nothing was stored"},
    507: {"model": s.ErrorOut,
          "description": "No space left on the feedback store's disk: nothing was "
                         "stored"}})
def learn(body: s.LearnRequest, project: ProjectDep, svc: ServiceDep) -> s.LearnResponse:
    items = [Decision(Record(id=r.id, title=r.title, abstract=r.abstract,
                             language=r.language, subjects=list(r.subjects)),
                      r.subjects, r.rejected, r.added) for r in body.records]
    done = svc.learn(project.served, items)
    return s.LearnResponse(stored=done.stored, learned=done.online,
                           redirected=done.redirected or None)


@router.post("/projects/{project_id}/reload", response_model=s.ReloadOut, responses={
    409: {"model": s.ErrorOut, "description": "The folder's model could not be loaded "
                                              "or does not suggest: the model loaded "
                                              "before keeps serving (the detail says "
                                              "why)"}})
def reload(project: ProjectDep, svc: ServiceDep) -> s.ReloadOut:
    """Load the project's folder again if its model changed (a new training or
    download) and serve it without downtime: requests in flight finish on the old
    model. Answers once this worker serves the new model; the other workers are asked
    to reload too (GET the project: each worker's version)."""
    done, asked = svc.reload(project.served)
    return s.ReloadOut(project=project.project_id, status=done.status,
                       model_version=_version(done.version),
                       previous_version=_version(done.previous),
                       seconds=round(done.seconds, 3), learned=done.learned,
                       worker=os.getpid(), others_asked=asked)


def _version(v: ModelVersion | None) -> s.ModelVersionOut | None:
    version = v.get("version") if v else None
    return None if v is None or version is None else s.ModelVersionOut(
        version=version, trained_at=v.get("trained_at"))


__all__ = ["router"]
