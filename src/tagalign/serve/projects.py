"""The served projects on tagalign's own API: how the server is (`tagalign.serve.health`),
what it serves and each project's state (`Service.info`).

``GET /tagalign/v1/health`` (``/live``, ``/ready``), ``GET /tagalign/v1/projects``,
``GET /tagalign/v1/projects/{id}``
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tagalign.serve import API, health
from tagalign.serve import schemas as s
from tagalign.serve.depends import ProjectDep, ServiceDep

router = APIRouter(prefix=API)
#: the health routes: no project in the path, none of the project routes' errors. Their
#: handlers are ``async`` and do no I/O (`tagalign.serve.health`): they answer on the
#: event loop while every thread of the pool is busy suggesting
health_router = APIRouter(prefix=API, tags=["health"])


@health_router.get("/health", response_model=s.HealthOut)
async def get_health(svc: ServiceDep) -> dict:
    """Each project's model and feedback store: 200 while the process answers, ``status``
    degraded when any of them is not ok."""
    return svc.checks()


@health_router.get("/health/live", response_model=s.LiveOut)
async def live() -> dict:
    """The process answers (a liveness probe): always 200."""
    return {"status": "ok"}


@health_router.get("/health/ready", response_model=s.ReadyOut, responses={
    503: {"model": s.ReadyOut, "description": "Not ready: stopping, or no project can "
          "suggest"}})
async def ready(request: Request, svc: ServiceDep) -> JSONResponse:
    """Ready for traffic (a readiness probe): not stopping, and at least one project can
    suggest; still ready while learning is degraded."""
    ok, body = health.readiness(svc.projects.items(), request.app.state.stopping.is_set())
    return JSONResponse(body, 200 if ok else 503)


@router.get("/projects")
def list_projects(svc: ServiceDep) -> dict[str, list[s.ProjectOut]]:
    return {"projects": [s.ProjectOut(**svc.info(served)) for served in svc.all_served()]}


@router.get("/projects/{project_id}", response_model=s.ProjectOut)
def get_project(project: ProjectDep, svc: ServiceDep) -> s.ProjectOut:
    return s.ProjectOut(**svc.info(project.served))


__all__ = ["health_router", "router"]
