"""The served projects on tagalign's own API: what the server serves and each project's
state (`Service.info`).

``GET /tagalign/v1/health``, ``GET /tagalign/v1/projects``,
``GET /tagalign/v1/projects/{id}``
"""

from __future__ import annotations

from fastapi import APIRouter

from tagalign.serve import API
from tagalign.serve import schemas as s
from tagalign.serve.depends import ProjectDep, ServiceDep

router = APIRouter(prefix=API)


@router.get("/health")
def health(svc: ServiceDep) -> dict:
    return {"status": "ok", "projects": len(svc.projects)}


@router.get("/projects")
def list_projects(svc: ServiceDep) -> dict[str, list[s.ProjectOut]]:
    return {"projects": [s.ProjectOut(**svc.info(served)) for served in svc.all_served()]}


@router.get("/projects/{project_id}", response_model=s.ProjectOut)
def get_project(project: ProjectDep, svc: ServiceDep) -> s.ProjectOut:
    return s.ProjectOut(**svc.info(project.served))


__all__ = ["router"]
