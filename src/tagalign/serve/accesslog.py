"""One access-log line per request, through the ``logging`` logger ``tagalign.access``.

Two forms (`configure`):

- ``json``: one JSON object per line on stdout — ``ts``, ``request_id``, ``method``,
  ``route`` (the template, ``/v1/projects/{project_id}/suggest``), ``project`` (a served
  id, else ``""``), ``status``, ``latency_ms``, ``records`` (records suggested for or
  learned; null for other requests) and ``pid`` (the worker) — for a log collector;
- ``text``: the same as a line for people, shown with the server's other messages.

``auto`` (the default) is text when stdout is a terminal and JSON otherwise: the usual
convention for services, whose output under systemd or in a container goes to a collector.
No line holds a record's text, a query string or the raw path (the route template stands
for it).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from typing import IO, Any, Literal

log = logging.getLogger("tagalign.access")

LogFormat = Literal["auto", "json", "text"]
FORMATS: tuple[str, ...] = ("auto", "json", "text")


class JsonFormatter(logging.Formatter):
    """A record as one JSON line: the request's fields when it carries them (``access``),
    else time, level, logger and message.

    Written here rather than taken from a library (python-json-logger): the fields are
    ours and fixed, and this is one ``json.dumps`` of them."""

    def format(self, record: logging.LogRecord) -> str:
        ts = _dt.datetime.fromtimestamp(record.created, _dt.UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
        fields = getattr(record, "access", None)
        if fields is None:
            fields = {"level": record.levelname, "logger": record.name,
                      "msg": record.getMessage()}
        return json.dumps({"ts": ts, **fields, "pid": record.process},
                          ensure_ascii=False, separators=(",", ":"))


def configure(fmt: LogFormat = "auto", stream: IO[str] | None = None) -> str:
    """Send access lines in form ``fmt``; returns the form chosen (``json`` or ``text``).

    ``json``: to ``stream`` (default stdout), one object per line, and nowhere else.
    ``text``: to the handlers of the ``tagalign`` logger (the CLI shows them on its
    console), or to stderr when it has none. Each worker process calls this once."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = stream if stream is not None else sys.stdout
    if fmt == "auto":
        fmt = "text" if out.isatty() else "json"
    for handler in list(log.handlers):
        log.removeHandler(handler)
    log.setLevel(logging.INFO)
    if fmt == "json":
        handler = logging.StreamHandler(out)
        handler.setFormatter(JsonFormatter())
        log.addHandler(handler)
        log.propagate = False
    else:
        log.propagate = True
        parent = logging.getLogger("tagalign")
        if not parent.handlers:  # used as a library: still a line per request
            handler = logging.StreamHandler(stream or sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            log.addHandler(handler)
            log.propagate = False
    return fmt


def request(*, request_id: str, method: str, route: str, project: str, status: int,
            seconds: float, records: int | None) -> None:
    """Log one answered request (nothing to do when no one listens)."""
    if not log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "request_id": request_id, "method": method, "route": route, "project": project,
        "status": status, "latency_ms": round(seconds * 1000, 2), "records": records}
    log.info("%d %s %s%s %.1f ms%s id=%s", status, method, route,
             f" [{project}]" if project else "", seconds * 1000,
             "" if records is None else f" records={records}", request_id,
             extra={"access": fields})


__all__ = ["FORMATS", "JsonFormatter", "LogFormat", "configure", "log", "request"]
