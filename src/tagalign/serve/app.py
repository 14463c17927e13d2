"""The FastAPI application: tagalign's API, Annif's API and the librarians' web page.

Two APIs side by side on one server:

- ``/tagalign/v1/…`` — tagalign's own API (title/abstract fields, reasons, warnings,
  feedback with accept/reject, records); OpenAPI at ``/openapi.json``, docs at ``/docs``;
  the web page at ``/`` uses it.
- ``/v1/…`` — Annif's REST API to the letter (`tagalign.serve.annif`): give Annif clients
  ``http://HOST:PORT/v1/``.
- ``/metrics`` — Prometheus metrics (`tagalign.serve.observe`, which also gives every
  answer an ``X-Request-ID`` and writes the access log).

Both are thin adapters over one `tagalign.serve.service.Service` (suggest, learn, project
info) and answer its errors through one handler, each in its own shape; models are loaded
once by the caller. This module only assembles the app: the service, the middleware, the
error handlers and the module-level routers, by resource (`OWN_ROUTERS`, `PAGE_ROUTERS`,
`tagalign.serve.annif.router`), whose handlers get the service and their project through
`tagalign.serve.depends`. tagalign's endpoints are plain ``def`` functions, so FastAPI
runs them in its thread pool and requests are served concurrently (the heavy parts —
numpy, faiss, omikuji, LightGBM — release the GIL).
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from tagalign.errors import UsageError
from tagalign.feedback import FeedbackStore, ServedStores, StoreFault
from tagalign.project import Project
from tagalign.records import Record
from tagalign.serve import (
    API,
    MAX_BODY,
    annif,
    auth,
    decisions,
    projects,
    queue,
    records,
    service,
    subjects,
    suggestions,
    updates,
)
from tagalign.serve import schemas as s
from tagalign.serve.guard import Guard
from tagalign.serve.observe import Telemetry
from tagalign.serve.service import Service
from tagalign.serve.tokens import TokenStore
from tagalign.serve.workers import Workers

STATIC = Path(__file__).parent / "static"
#: the documented body of a POST that reads none (reload, the queue's finish)
EMPTY_JSON_BODY = {"required": True, "description": "None is read; send {} as JSON (every "
                   "POST must say Content-Type: application/json)", "content": {
                       "application/json": {"schema": {"type": "object"}}}}

#: the health routes, first in tagalign's document, without the project routes' errors
HEALTH_ROUTER = projects.health_router
#: tagalign's own API (each router's module says what it serves), in its document's order
OWN_ROUTERS = (projects.router, suggestions.router, updates.router, records.router)
#: beside it: the web page's subject search and review queue, the catalogue's pull of the
#: decisions
PAGE_ROUTERS = (subjects.router, queue.router, decisions.router)


def _too_large(path: str, max_body: int):
    """413 as Annif documents it (text/plain) on its paths, as JSON on ours."""
    msg = f"request body over {max_body} bytes"
    if annif.is_annif_path(path):
        return PlainTextResponse(msg, 413)
    return JSONResponse({"detail": msg}, 413)


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
            response = _too_large(scope.get("path", ""), self.max_body)
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


class WorkerHeader:
    """ASGI middleware: every answer names the worker process that gave it (``X-Worker``:
    its pid), so clients and load tests can tell the workers of one port apart; once the
    process stops serving (``stopping`` is set: `tagalign.serve.process.ServingProcess`),
    it also says ``Connection: close`` (uvicorn then closes the connection after the
    answer, and the client opens a new one elsewhere)."""

    def __init__(self, app, stopping: threading.Event):
        self.app = app
        self.pid = str(os.getpid()).encode()
        self.stopping = stopping

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def named(message):
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"x-worker", self.pid)]
                if self.stopping.is_set():
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, named)


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


def own_error(exc: Exception) -> JSONResponse:
    """tagalign's error body for an error of the service (`service.http_status`)."""
    return JSONResponse({"detail": str(exc)}, service.http_status(exc))


def error_response(path: str, exc: Exception, project_id: str | None = None) -> JSONResponse:
    """An error of the service in the shape of the API ``path`` belongs to (Annif's
    problem+json on ``/v1``, ``{"detail"}`` on tagalign's own), with the headers it asks
    for (a feedback store unavailable: ``Retry-After``)."""
    exc = service.public_error(exc, project_id)
    if annif.is_annif_path(path):
        response = annif.error_response(exc, project_id)
    else:
        response = own_error(exc)
    if isinstance(exc, StoreFault):
        response.headers.update(exc.headers)
    return response


def _answer_errors(app: FastAPI, max_body: int) -> None:
    """The app's error handlers: a body FastAPI refuses (422 with our body), the service's
    errors (each API's shape, `error_response`) and Starlette's HTTP errors (Annif's
    problems on its paths)."""
    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError):
        # the offending input is not echoed: it may be bytes, NaN or a megabyte of text,
        # none of which belongs in (or always fits into) a JSON error body
        errors = [_error(e) for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(f"{e['field']}: {e['msg']}" for e in errors),
                             "errors": errors}, 422)

    async def service_error(request: Request, exc: Exception):
        # one handler, each API's own error shape (Annif's: problem+json)
        return error_response(request.url.path, exc, request.path_params.get("project_id"))

    for kind in service.ERRORS:
        app.add_exception_handler(kind, service_error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if annif.is_annif_path(request.url.path):
            if exc.status_code == 413:
                return _too_large(request.url.path, max_body)
            return annif.problem(exc.status_code, "Error", str(exc.detail))
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            # undecodable bytes are bad JSON too: same status as any other bad JSON
            return JSONResponse({"detail": "body: not valid UTF-8 JSON", "errors": [
                {"field": "body", "type": "json_invalid", "msg": "not valid UTF-8 JSON"}]}, 422)
        return await http_exception_handler(request, exc)


def _document(app: FastAPI, tokens: TokenStore | None, require_token_for_suggest: bool
              ) -> dict[str, Any]:
    """tagalign's OpenAPI document, made once: our 422 body (see `_answer_errors`) instead
    of FastAPI's default description, a JSON body on every POST, the tokens' security."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        schema["components"]["schemas"]["HTTPValidationError"] = (
            s.ValidationErrorOut.model_json_schema())
        for operations in schema["paths"].values():
            # the guard wants the JSON type on a POST without a body too (else 415): a
            # client made from the document sends it with an empty object
            if "post" in operations and "requestBody" not in operations["post"]:
                operations["post"]["requestBody"] = EMPTY_JSON_BODY
        if tokens is not None:
            auth.document(schema, require_token_for_suggest)
        app.openapi_schema = schema
    return app.openapi_schema


def create_app(projects: Mapping[str, Project], store: FeedbackStore | ServedStores,
               records: Mapping[str, Record] | None = None,
               review: queue.RecordQueue | None = None, *,
               max_body: int = MAX_BODY, allowed_hosts: Sequence[str] = (),
               cors_origins: Sequence[str] = (), workers: Workers | None = None,
               tokens: TokenStore | None = None, require_token_for_suggest: bool = False,
               metrics: bool = True, stopping: threading.Event | None = None) -> FastAPI:
    """The app serving ``projects`` (id → project; learning only where a project's
    ``allow_learn`` is set); bodies over ``max_body`` bytes are refused with 413.
    ``allowed_hosts``: Host names served besides localhost's; ``cors_origins``: origins
    whose pages may POST (`tagalign.serve.guard`); ``workers``: the other processes
    serving the same port, if any (`tagalign.serve.workers`); ``tokens``: every write
    then needs one of its tokens, suggest too with ``require_token_for_suggest``
    (`tagalign.serve.auth`); ``metrics``: serve ``GET /metrics`` (request ids and the access
    log are always on: `tagalign.serve.observe`); ``stopping``: set once the process stops
    serving (answers then say ``Connection: close``; default: an event of this app's own,
    for a caller that runs it as it likes). The store is closed when the server stops."""
    if require_token_for_suggest and tokens is None:
        raise UsageError("requiring a token for suggest needs a tokens file")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        store.close()  # after the requests in flight finished (uvicorn's graceful stop)

    app = FastAPI(title="tagalign", version="1", lifespan=lifespan,
                  description="GND subject suggestions with reasons, warnings and feedback. "
                              "Annif's REST API is served beside it at /v1 (give Annif "
                              "clients http://HOST:PORT/v1/); this document describes "
                              f"tagalign's own API under {API}.",
                  # every route: the guard's answers (`tagalign.serve.guard`)
                  responses={
                      415: {"model": s.ErrorOut, "description": "A POST not declared "
                            "Content-Type: application/json (also without a body)"},
                      421: {"model": s.ErrorOut, "description": "Host header names no "
                            "host this server answers for (--allowed-host)"}})
    telemetry = Telemetry(projects, metrics=metrics)
    svc = Service(projects, store, records, workers, observer=telemetry)
    telemetry.metrics.watch_stores(lambda: {pid: svc.store_health(pid) for pid in svc.projects})
    app.state.service = svc  # what the routers' handlers get (`tagalign.serve.depends`)
    app.state.review = review
    app.state.projects = svc.projects  # the live projects: SIGHUP reloads them (`factory`)
    stopping = stopping or threading.Event()
    app.state.stopping = stopping  # /health/ready answers 503 once it is set
    app.add_middleware(BodyLimit, max_body=max_body)
    app.state.tokens = tokens
    if tokens is not None:  # inside the guard: 421 and 415 first, then 401/403
        app.add_middleware(auth.TokenGuard, tokens=tokens, render=error_response,
                           require_for_suggest=require_token_for_suggest)
    app.add_middleware(Guard, render=error_response, hosts=allowed_hosts,
                       origins=cors_origins)
    app.add_middleware(WorkerHeader, stopping=stopping)
    telemetry.install(app)  # the outermost middleware, and GET /metrics

    _answer_errors(app, max_body)

    own: dict[int | str, dict[str, Any]] = {
        404: {"model": s.ErrorOut, "description": "Unknown project or record"},
        413: {"model": s.ErrorOut, "description": f"Body over {max_body} bytes"},
        503: {"model": s.ErrorOut, "description": "Project not trained yet"}}
    app.include_router(HEALTH_ROUTER)
    for router in OWN_ROUTERS:
        app.include_router(router, responses=own)
    for router in PAGE_ROUTERS:
        app.include_router(router)
    subjects.warm(svc.projects)

    # FastAPI's documented hook for a custom document
    app.openapi = partial(_document, app, tokens, require_token_for_suggest)  # type: ignore[method-assign]
    app.include_router(annif.router)

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
