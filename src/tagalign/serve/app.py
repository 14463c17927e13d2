"""The FastAPI application: an Annif-like REST API plus the librarians' web page.

Thin layer over `Project`; models are loaded once by the caller. Endpoints are plain
``def`` functions, so FastAPI runs them in its thread pool and requests are served
concurrently (the heavy parts — numpy, faiss, omikuji, LightGBM — release the GIL).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from tagalign.project import Project
from tagalign.records import Record
from tagalign.serve import schemas as s
from tagalign.serve.feedback import Decision, FeedbackStore
from tagalign.suggest import Suggestion

MAX_BODY = 1_000_000
STATIC = Path(__file__).parent / "static"


class BodyLimit:
    """ASGI middleware: 413 for bodies over ``max_body`` bytes, declared or streamed."""

    def __init__(self, app, max_body: int = MAX_BODY):
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", [])).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body:
            response = JSONResponse({"detail": f"request body over {self.max_body} bytes"}, 413)
            return await response(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    # an HTTPException passes FastAPI's body parsing untouched → 413
                    raise HTTPException(413, f"request body over {self.max_body} bytes")
            return message

        await self.app(scope, limited, send)


def _out(rows: list[Suggestion]) -> list[s.SuggestionOut]:
    return [s.SuggestionOut(id=x.id, label=x.label, score=round(float(x.score), 6),
                            reasons=x.reasons) for x in rows]


def create_app(projects: Mapping[str, Project], store: FeedbackStore,
               records: Mapping[str, Record] | None = None) -> FastAPI:
    app = FastAPI(title="tagalign", version="1",
                  description="GND subject suggestions with reasons; Annif-like API.")
    records = records or {}
    app.add_middleware(BodyLimit, max_body=MAX_BODY)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError):
        errors = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
            errors.append(f"{where}: {e.get('msg')}")
        return JSONResponse({"detail": "; ".join(errors), "errors": exc.errors()}, 422)

    def project(project_id: str) -> Project:
        if project_id not in projects:
            raise HTTPException(404, f"project {project_id!r} not found; "
                                     f"known: {', '.join(sorted(projects))}")
        return projects[project_id]

    @app.get("/v1/health")
    def health() -> dict:
        return {"status": "ok", "projects": len(projects)}

    @app.get("/v1/projects")
    def list_projects() -> dict[str, list[s.ProjectOut]]:
        return {"projects": [s.ProjectOut(**p.info() | {"id": pid})
                             for pid, p in projects.items()]}

    @app.get("/v1/projects/{project_id}", response_model=s.ProjectOut)
    def get_project(project_id: str) -> s.ProjectOut:
        return s.ProjectOut(**project(project_id).info() | {"id": project_id})

    @app.post("/v1/projects/{project_id}/suggest", response_model=s.SuggestResponse)
    def suggest(project_id: str, body: s.SuggestRequest) -> s.SuggestResponse:
        proj = project(project_id)
        rec = Record(id="request", title=body.title, abstract=body.abstract,
                     language=body.language)
        rows = proj.suggest([rec], limit=body.limit, threshold=body.threshold)[0]
        return s.SuggestResponse(results=_out(rows))

    @app.post("/v1/projects/{project_id}/suggest-batch", response_model=s.BatchResponse)
    def suggest_batch(project_id: str, body: s.BatchRequest) -> s.BatchResponse:
        proj = project(project_id)
        recs = [Record(id=r.id or str(i), title=r.title, abstract=r.abstract,
                       language=r.language) for i, r in enumerate(body.records)]
        rows = proj.suggest(recs, limit=body.limit, threshold=body.threshold)
        return s.BatchResponse(results=[_out(r) for r in rows])

    @app.post("/v1/projects/{project_id}/learn", response_model=s.LearnResponse)
    def learn(project_id: str, body: s.LearnRequest) -> s.LearnResponse:
        proj = project(project_id)
        unknown = sorted({sid for r in body.records for sid in [*r.subjects, *r.rejected]
                          if sid not in proj.vocab})
        if unknown:
            raise HTTPException(
                422, f"subject ids not in the vocabulary: {', '.join(unknown[:20])}")
        items = [Decision(Record(id=r.id, title=r.title, abstract=r.abstract,
                                 language=r.language, subjects=list(r.subjects)),
                          r.subjects, r.rejected) for r in body.records]
        stored = store.add(project_id, items)
        learned = False
        confirmed = [d.record for d in items if d.record.subjects]
        if confirmed and proj.recipe is not None:
            try:
                proj.recipe.learn(confirmed)
                learned = True
            except NotImplementedError:
                learned = False
        return s.LearnResponse(stored=stored, learned=learned)

    @app.get("/v1/records/{record_id}", response_model=s.RecordOut)
    def get_record(record_id: str) -> s.RecordOut:
        rec = records.get(record_id)
        if rec is None:
            raise HTTPException(404, f"record {record_id!r} not found"
                                + ("" if records else " (no records file loaded)"))
        return s.RecordOut(id=rec.id, title=rec.title, abstract=rec.abstract,
                           language=rec.language, subjects=rec.subjects)

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
