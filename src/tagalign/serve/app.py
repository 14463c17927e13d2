"""The FastAPI application: an Annif-like REST API plus the librarians' web page.

Thin layer over `Project`; models are loaded once by the caller. Endpoints are plain
``def`` functions, so FastAPI runs them in its thread pool and requests are served
concurrently (the heavy parts — numpy, faiss, omikuji, LightGBM — release the GIL).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

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


def _field(loc) -> str:
    """``("body", "records", 3, "title")`` → ``records.3.title`` (the whole body: ``body``)."""
    return ".".join(str(p) for p in loc if p != "body") or "body"


def _error(e: dict[str, Any]) -> dict[str, str]:
    """One validation error as plain strings; bad JSON reports where parsing stopped."""
    if e.get("type") == "json_invalid":  # loc is ("body", character offset)
        where = e.get("loc", ())[-1]
        why = (e.get("ctx") or {}).get("error", "")
        return {"field": "body", "type": "json_invalid",
                "msg": f"invalid JSON at character {where}" + (f" ({why})" if why else "")}
    return {"field": _field(e.get("loc", ())), "type": str(e.get("type", "")),
            "msg": str(e.get("msg", ""))}


def _with_titles(reasons: dict[str, Any], titles: Mapping[str, str]) -> dict[str, Any]:
    """Neighbours as ``{"id", "title"?, …}`` dicts, titles filled from ``titles``.

    Recipes may name neighbour records by id only (a string) or as dicts; clients get one
    shape, and a title whenever the recipe, the records file or a learned record has one.
    """
    nbrs = reasons.get("neighbours")
    if not isinstance(nbrs, list):
        return reasons
    out = []
    for n in nbrs:
        n = {"id": n} if isinstance(n, str) else dict(n) if isinstance(n, dict) else n
        if isinstance(n, dict) and not n.get("title") and n.get("id") in titles:
            n["title"] = titles[n["id"]]
        out.append(n)
    return {**reasons, "neighbours": out}


def _out(rows: list[Suggestion], titles: Mapping[str, str]) -> list[s.SuggestionOut]:
    return [s.SuggestionOut(id=x.id, label=x.label, score=round(float(x.score), 6),
                            reasons=_with_titles(x.reasons, titles)) for x in rows]


def create_app(projects: Mapping[str, Project], store: FeedbackStore,
               records: Mapping[str, Record] | None = None) -> FastAPI:
    app = FastAPI(title="tagalign", version="1",
                  description="GND subject suggestions with reasons; Annif-like API.")
    records = records or {}
    # neighbour titles for reasons: the records file, then records learned here
    titles: dict[str, str] = {rid: r.title for rid, r in records.items()}
    app.add_middleware(BodyLimit, max_body=MAX_BODY)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError):
        # the offending input is not echoed: it may be bytes, NaN or a megabyte of text,
        # none of which belongs in (or always fits into) a JSON error body
        errors = [_error(e) for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(f"{e['field']}: {e['msg']}" for e in errors),
                             "errors": errors}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            # undecodable bytes are bad JSON too: same status as any other bad JSON
            return JSONResponse({"detail": "body: not valid UTF-8 JSON", "errors": [
                {"field": "body", "type": "json_invalid", "msg": "not valid UTF-8 JSON"}]}, 422)
        return await http_exception_handler(request, exc)

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
        return s.SuggestResponse(results=_out(rows, titles))

    @app.post("/v1/projects/{project_id}/suggest-batch", response_model=s.BatchResponse)
    def suggest_batch(project_id: str, body: s.BatchRequest) -> s.BatchResponse:
        proj = project(project_id)
        recs = [Record(id=r.id or str(i), title=r.title, abstract=r.abstract,
                       language=r.language) for i, r in enumerate(body.records)]
        rows = proj.suggest(recs, limit=body.limit, threshold=body.threshold)
        return s.BatchResponse(results=[_out(r, titles) for r in rows])

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
        titles.update((d.record.id, d.record.title) for d in items)
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
