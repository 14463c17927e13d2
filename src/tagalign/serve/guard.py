"""Who may reach the server from a browser: the Host check, JSON-only writes and CORS.

A server on 127.0.0.1 is reachable from every page its user opens. Three rules keep those
pages from changing it (learn stores feedback and teaches the model; finishing a queue
record moves the queue):

- **Host check** (DNS rebinding): a page whose name was made to resolve to 127.0.0.1
  sends its own name in ``Host``; only the configured names are served (`LOCAL_HOSTS`, the
  bind host and ``--allowed-host``, any port), others get 421 Misdirected Request.
- **JSON only**: every POST must say ``Content-Type: application/json`` (bodiless ones
  too), else 415. A browser sends that type cross-site only after a CORS preflight, which
  the next rule fails; a "simple" request (``text/plain``, forms) never reaches a route.
  The one exception is Annif's ``/v1/projects/{id}/suggest``, a form by Annif's document;
  it changes nothing.
- **CORS**: Annif's paths allow GET (and simple requests) from any origin, as Annif does;
  POST with JSON — and tagalign's own API at all — only from the origins of an allow-list
  (``--cors-origin``).

Refusals come from `refuse`, in the error shape of the API the path belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable

from starlette.middleware.cors import CORSMiddleware

from tagalign.errors import InputError
from tagalign.serve import annif

#: names always served, with any port: what a local client or browser sends
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Annif's form route: the only POST that need not be JSON
_FORM_ROUTE = re.compile(r"^/v1/projects/[^/]+/suggest$")


class UnsupportedMediaTypeError(InputError):
    """A POST whose body is not declared ``application/json``."""

    http_status = 415


class MisdirectedRequestError(InputError):
    """A request naming a host this server does not answer for (DNS rebinding)."""

    http_status = 421


def host_name(header: str) -> str:
    """``Host`` without its port, lower case: ``[::1]:8000`` → ``::1``, ``A.b:80`` → ``a.b``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def is_json(content_type: str) -> bool:
    """Whether a Content-Type header is ``application/json`` (parameters aside)."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def needs_json(method: str, path: str) -> bool:
    return method == "POST" and not _FORM_ROUTE.match(path)


Render = Callable[[str, Exception], Callable[..., Awaitable[None]]]


class Guard:
    """ASGI middleware: the Host check, JSON-only POSTs and CORS (see the module).

    ``hosts``: names served besides `LOCAL_HOSTS` (``*``: any); ``origins``: the CORS
    allow-list; ``render(path, error)``: the response an API gives for an error."""

    def __init__(self, app, render: Render, hosts: Iterable[str] = (),
                 origins: Iterable[str] = ()):
        self.app = app
        self.render = render
        self.hosts = {host_name(h) for h in (*LOCAL_HOSTS, *hosts)}
        self.origins = {o.rstrip("/") for o in origins}
        # Annif's CORS: any origin, Starlette's default methods (GET), no extra headers
        self.any_origin = CORSMiddleware(self._checked, allow_origins=["*"])
        self.listed = CORSMiddleware(self._checked, allow_origins=sorted(self.origins),
                                     allow_methods=["GET", "POST"],
                                     # Authorization: the API token (`serve.auth`)
                                     allow_headers=["Authorization", "Content-Type"])

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers", []))
        path = scope.get("path", "")
        host = host_name(headers.get(b"host", b"").decode("latin-1"))
        if "*" not in self.hosts and host not in self.hosts:
            error = MisdirectedRequestError(f"host {host!r} is not served here; start the "
                                            "server with --allowed-host NAME to allow it")
            return await self.render(path, error)(scope, receive, send)
        origin = headers.get(b"origin", b"").decode("latin-1")
        if origin and origin in self.origins:
            return await self.listed(scope, receive, send)
        if annif.is_annif_path(path):
            return await self.any_origin(scope, receive, send)
        return await self._checked(scope, receive, send)

    async def _checked(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        if needs_json(scope["method"], scope.get("path", "")) and not is_json(content_type):
            error = UnsupportedMediaTypeError(
                "send the body as JSON with Content-Type: application/json (also when "
                f"there is no body); got {content_type[:60] or 'none'!r}")
            return await self.render(scope.get("path", ""), error)(scope, receive, send)
        return await self.app(scope, receive, send)


__all__ = ["LOCAL_HOSTS", "Guard", "MisdirectedRequestError", "UnsupportedMediaTypeError",
           "host_name", "is_json"]
