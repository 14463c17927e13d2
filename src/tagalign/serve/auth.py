"""Who may change the server: API tokens (bearer) for every request that is not a read.

With a tokens file (`tagalign.serve.tokens`, ``tagalign serve --tokens-file``) every
request that could change state — any method but GET, HEAD and OPTIONS — needs
``Authorization: Bearer TOKEN``, except the reads sent as POST: suggest and suggest-batch
on both APIs and Annif's detect-language, which stay open as in Annif unless
``--require-token-for-suggest``; and one read needs a token all the same, the export of
the librarians' decisions (``GET /tagalign/v1/projects/{id}/decisions``). Deny by
default: a route added later (the projects' reload, anything) is protected without naming
it here; only the open reads are listed.

- no token (or another scheme than Bearer): **401** with ``WWW-Authenticate: Bearer``;
- a token the file does not hold: **403**;

each in the error shape of the API the path belongs to (Annif's problem+json on ``/v1``,
``{"detail"}`` on ``/tagalign/v1``), before the body is read or validated and before the
route's own checks (``allow_learn`` still answers its 403 to a good token). An accepted
request carries the token's name in ``request.state.token_name``; the log names it (never
the token).

The check is ASGI middleware rather than a FastAPI dependency on each route, so that it
cannot be forgotten on a new route and runs before body parsing; `document` adds the
bearer scheme to the OpenAPI document for the routes the same rule protects.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from fastapi.security.utils import get_authorization_scheme_param
from starlette.responses import Response

from tagalign.errors import PermissionDeniedError, UnauthorizedError
from tagalign.serve.tokens import TokenStore

log = logging.getLogger(__name__)

#: methods that read: never need a token
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: POSTs that only read (they compute an answer and store nothing): open unless
#: ``require_token_for_suggest``
_READ_POSTS = re.compile(r"^(?:/v1|/tagalign/v1)/projects/[^/]+/suggest(?:-batch)?$"
                         r"|^/v1/detect-language$")
#: GETs that need a token all the same: the librarians' decisions (`serve/decisions.py`)
_PRIVATE_READS = re.compile(r"^/tagalign/v1/projects/[^/]+/decisions$")
SCHEME = "bearer"  # the security scheme's name in the OpenAPI document
CHALLENGE = 'Bearer realm="tagalign"'


def needs_token(method: str, path: str, require_for_suggest: bool = False) -> bool:
    """Whether a request (or an OpenAPI path template) needs a token."""
    if method.upper() in SAFE_METHODS:
        return method.upper() != "OPTIONS" and bool(_PRIVATE_READS.match(path))
    if _READ_POSTS.match(path):
        return require_for_suggest
    return True


class UnknownTokenError(PermissionDeniedError):
    """A bearer token that the tokens file does not hold (or no longer holds)."""


Render = Callable[[str, Exception], Response]


class TokenGuard:
    """ASGI middleware: the token check of the module docstring. ``render(path, error)``:
    the response an API gives for an error (`tagalign.serve.app.error_response`)."""

    def __init__(self, app, tokens: TokenStore, render: Render,
                 require_for_suggest: bool = False):
        self.app = app
        self.tokens = tokens
        self.render = render
        self.require_for_suggest = require_for_suggest

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not needs_token(scope["method"], scope.get("path", ""),
                                                      self.require_for_suggest):
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        header = dict(scope.get("headers", [])).get(b"authorization", b"").decode("latin-1")
        scheme, token = get_authorization_scheme_param(header)
        if scheme.lower() != "bearer" or not token:
            error: Exception = UnauthorizedError(
                "this request needs an API token: send the header Authorization: Bearer "
                "TOKEN (the server's admin makes one with `tagalign tokens add NAME`)")
            return await self._refuse(path, error, CHALLENGE, scope, receive, send)
        name = self.tokens.verify(token)
        if name is None:
            error = UnknownTokenError("unknown API token (never issued by this server, or "
                                      "removed)")
            return await self._refuse(path, error, CHALLENGE + ', error="invalid_token"',
                                      scope, receive, send)
        scope.setdefault("state", {})["token_name"] = name
        return await self.app(scope, receive, self._logged(scope, name, send))

    async def _refuse(self, path: str, error: Exception, challenge: str, scope, receive,
                      send) -> None:
        response = self.render(path, error)
        response.headers["WWW-Authenticate"] = challenge
        await response(scope, receive, send)

    @staticmethod
    def _logged(scope, name: str, send):
        """``send``, logging the request with the token's name and the answer's status
        (writes at INFO; reads that needed a token at DEBUG: they can be many)."""
        level = logging.DEBUG if _READ_POSTS.match(scope.get("path", "")) else logging.INFO

        async def logging_send(message):
            if message["type"] == "http.response.start":
                log.log(level, "%s %s by token %r: %d", scope["method"], scope.get("path"),
                        name, message["status"])
            await send(message)

        return logging_send


def document(schema: dict[str, Any], require_for_suggest: bool = False) -> None:
    """Declare the bearer scheme in an OpenAPI ``schema`` and require it, with its 401 and
    403 answers, on every operation `needs_token` protects (the same rule as the check;
    written here because the check is middleware, which FastAPI does not document)."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SCHEME] = {
        "type": "http", "scheme": "bearer",
        "description": "An API token made by `tagalign tokens add NAME --file TOKENS`; "
                       "needed for learn, the review queue's decisions and every other "
                       "request that changes the server"
                       + (", and for suggest" if require_for_suggest else "")}
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            if not isinstance(op, dict) or not needs_token(method, path, require_for_suggest):
                continue
            op["security"] = [{SCHEME: []}]
            responses = op.setdefault("responses", {})
            responses["401"] = {"description": "No API token (Authorization: Bearer TOKEN)",
                                "content": error}
            forbidden = responses.get("403", {}).get("description")
            responses["403"] = {"description": "Unknown API token"
                                + (f"; or: {forbidden}" if forbidden else ""),
                                "content": error}


__all__ = ["SAFE_METHODS", "TokenGuard", "UnknownTokenError", "document", "needs_token"]
