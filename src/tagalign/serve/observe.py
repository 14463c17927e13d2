"""What the server tells about each request: an id, metrics and one access-log line.

`Telemetry` ties the three to an app. `Telemetry.install` adds `Observe`, the outermost
middleware (so the answers of the other middleware — 413, 415, 421 — get an id and are
counted too), and ``GET /metrics`` unless metrics are off; the service layer reports to it
what it suggested and learned (it is the `tagalign.serve.service.Observer` of both APIs).

`Observe` is plain ASGI, as `tagalign.serve.app.BodyLimit`: Starlette's
``BaseHTTPMiddleware`` would add a task and a stream per request to a single-record
suggest that takes a few milliseconds. A request's count of records reaches it from the
service through a context variable holding one mutable `Exchange` per request: the
endpoints run in worker threads with a copy of the request's context, and a copy still
holds the same object.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response

from tagalign.project import Project
from tagalign.serve import accesslog
from tagalign.serve.metrics import CONTENT_TYPE, Metrics, NoMetrics
from tagalign.suggest import Tagged

REQUEST_ID = "X-Request-ID"
#: an incoming request id is kept when it looks like one (UUIDs, hex, ULIDs, dotted or
#: colon-separated trace ids); anything else — long, spaced, other characters — is replaced,
#: so a client cannot write arbitrary text into the log
_GOOD_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: methods counted by name; any other word a client sends counts as "other"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: the route label of a request that reached no route (see `_route`)
UNROUTED = "unrouted"


@dataclass(slots=True)
class Exchange:
    """One request as the middleware and the service layer share it."""

    request_id: str
    records: int | None = None


_current: ContextVar[Exchange | None] = ContextVar("tagalign_exchange", default=None)


def request_id(headers: Sequence[tuple[bytes, bytes]]) -> str:
    """The client's ``X-Request-ID`` when it is a sane id, else a new one (uuid4, hex)."""
    for name, value in headers:
        if name == b"x-request-id":
            given = value.decode("latin-1").strip()
            if _GOOD_ID.fullmatch(given):
                return given
            break
    return uuid.uuid4().hex


def _note_records(n: int) -> None:
    exchange = _current.get()
    if exchange is not None:
        exchange.records = n


class Telemetry:
    """Request ids, the access log and (unless ``metrics`` is False) the metrics of an app
    serving ``projects``."""

    def __init__(self, projects: Mapping[str, Project], *, metrics: bool = True):
        self.projects = projects
        self.enabled = metrics
        self.metrics: Metrics | NoMetrics = Metrics(projects) if metrics else NoMetrics()

    # -- the service layer's observer --------------------------------------------------
    def suggested(self, project_id: str, tagged: Sequence[Tagged]) -> None:
        _note_records(len(tagged))
        self.metrics.suggested(project_id, tagged)

    def learned(self, project_id: str, records: int, outcome: str) -> None:
        _note_records(records)
        self.metrics.learned(project_id, outcome)

    def learn_failed(self, project_id: str, records: int, reason: str) -> None:
        _note_records(records)
        self.metrics.learn_failed(project_id, reason)

    # -- reloads (`tagalign.serve.reload.ReloadObserver`; the loads at start the metrics
    # counted themselves) --------------------------------------------------------------
    def model_loaded(self, project_id: str, seconds: float, version: str,
                     trained_at: str | None) -> None:
        self.metrics.model_loaded(project_id, seconds, version, trained_at or "")

    def model_load_failed(self, project_id: str) -> None:
        self.metrics.model_load_failed(project_id)

    # -- the app -----------------------------------------------------------------------
    def install(self, app: FastAPI) -> None:
        """Call after the app's other middleware: `Observe` must wrap them all.
        ``app.state.metrics`` is the `Metrics` (or `NoMetrics`) for model reloads."""
        app.state.metrics = self.metrics
        app.add_middleware(Observe, telemetry=self)
        if self.enabled:
            app.add_api_route("/metrics", self.scrape, methods=["GET"],
                              include_in_schema=False)

    def scrape(self) -> Response:
        """``GET /metrics``: Prometheus' text format (a plain ``def``: in multiprocess
        mode it reads every worker's files, off the event loop)."""
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)

    def answered(self, scope: dict[str, Any], exchange: Exchange, status: int,
                 seconds: float) -> None:
        route, params = _route(scope)
        project = params.get("project_id", "")
        if project not in self.projects:
            project = ""  # an id no one serves: one series, whatever the client sends
        method = scope["method"] if scope["method"] in METHODS else "other"
        self.metrics.request(route, method, status, project, seconds)
        accesslog.request(request_id=exchange.request_id, method=method, route=route,
                          project=project, status=status, seconds=seconds,
                          records=exchange.records)


def _route(scope: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The route template the app's router chose, or `UNROUTED`, and the path parameters.

    A request the other middleware answered (413 by declared size, 415, 421) never
    reached the router; finding its route here would take FastAPI's private routing
    internals, so it counts as `UNROUTED`, as a path no route serves."""
    route = scope.get("route")
    return getattr(route, "path", None) or UNROUTED, scope.get("path_params") or {}


class Observe:
    """ASGI middleware: a request id (kept or made, returned as ``X-Request-ID`` on every
    answer), the latency until the answer is sent, then metrics and the access line."""

    def __init__(self, app, telemetry: Telemetry):
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        exchange = Exchange(request_id(scope.get("headers", ())))
        header = (b"x-request-id", exchange.request_id.encode("ascii"))
        status: int | None = None
        done = False

        def finish(code: int) -> None:
            nonlocal done
            done = True
            self.telemetry.answered(scope, exchange, code, time.perf_counter() - start)

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                # counted and logged before the last bytes leave: a client holding its
                # answer finds it in /metrics and in the log
                finish(status or 500)
            await send(message)

        token = _current.set(exchange)
        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            if status is None:
                # Starlette's own answer to an unhandled error, with the id; its
                # ServerErrorMiddleware (outside) sees the answer started and re-raises,
                # so the traceback is still logged
                await PlainTextResponse("Internal Server Error", 500)(scope, receive,
                                                                      send_with_id)
            raise
        finally:
            _current.reset(token)
            if not done:  # no complete answer; none begun: the client went away (nginx's 499)
                finish(499 if status is None else status)


__all__ = ["REQUEST_ID", "UNROUTED", "Exchange", "Observe", "Telemetry", "request_id"]
