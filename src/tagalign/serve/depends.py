"""What the handlers of both APIs need, as FastAPI dependencies (``Depends``).

The app keeps its `Service` and the review queue on ``app.state``
(`tagalign.serve.app.create_app`); the routers are module-level (`tagalign.serve.projects`,
`suggestions`, `updates`, `records`, `subjects`, `queue`, `decisions` and Annif's
`tagalign.serve.annif`) and take them from here:

- `ServiceDep`: the app's `Service`;
- `ProjectDep`: the project a path's ``{project_id}`` names, looked up once a request
  (`Lookup`), when the handler first asks — after FastAPI (or Annif's own parsing)
  has read the body and the parameters, so a request both malformed and naming an
  unknown project is answered as malformed (422, Annif's 400), as it always was.

The review queue's dependency is `tagalign.serve.queue`'s own (``QueueDep``).

The dependencies are ``async``: FastAPI calls them on the event loop, not in a second trip
through its thread pool (`tagalign.serve.suggestions.json_answer` says why that counts).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from tagalign.serve.service import Served, Service


class Lookup:
    """The project ``project_id`` of one request: `served` looks it up in the service
    the first time (`UnknownProjectError`: 404), and gives the same `Served` after."""

    __slots__ = ("_served", "project_id", "service")

    def __init__(self, service: Service, project_id: str):
        self.service = service
        self.project_id = project_id
        self._served: Served | None = None

    @property
    def served(self) -> Served:
        if self._served is None:
            self._served = self.service.served(self.project_id)
        return self._served


async def service(request: Request) -> Service:
    return request.app.state.service


async def lookup(project_id: str, svc: Annotated[Service, Depends(service)]) -> Lookup:
    return Lookup(svc, project_id)


ServiceDep = Annotated[Service, Depends(service)]
ProjectDep = Annotated[Lookup, Depends(lookup)]

__all__ = ["Lookup", "ProjectDep", "ServiceDep", "lookup", "service"]
