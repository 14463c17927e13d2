"""A bounded asyncio load generator for `tagalign serve` (benchmarks/serve/load.py,
benchmarks/serve/serve_load.py, tests).

``clients`` concurrent clients share one queue of jobs: ``suggest`` requests and, spread
evenly among them, ``learn`` requests that each write one record's decisions to the
feedback store. Every job runs exactly once, so a run always stops by itself; timeouts
count as errors. Localhost is what it is meant for; nothing here retries.

`run_until` instead sends suggests until told to stop, keeping each answer's model version
and worker (a reload or a stop during the load, `benchmarks/serve/serve_load.py`).

Written on httpx's asyncio client rather than Locust: a fixed number of requests with
exact per-request bookkeeping (which learn rows the server acknowledged) is all we need,
and Locust would bring gevent, which monkey-patches the process the test server runs in.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
import numpy as np

from tagalign.records import Record

API = "/tagalign/v1"


@dataclass
class LoadResult:
    suggest_ms: list[float] = field(default_factory=list)
    learn_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rows_committed: int = 0  # decisions the server acknowledged ("stored")
    learned_ids: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def percentile(self, q: float, learn: bool = False) -> float:
        values = self.learn_ms if learn else self.suggest_ms
        return float(np.percentile(values, q)) if values else float("nan")

    def summary(self) -> str:
        n = len(self.suggest_ms) + len(self.learn_ms)
        return (f"{n} requests in {self.wall_s:.1f} s ({n / max(self.wall_s, 1e-9):.1f}/s); "
                f"suggest p50 {self.percentile(50):.0f} ms, p95 {self.percentile(95):.0f} ms; "
                f"learn p50 {self.percentile(50, True):.0f} ms, "
                f"p95 {self.percentile(95, True):.0f} ms; errors {len(self.errors)}; "
                f"feedback rows committed {self.rows_committed}")


def _suggest_body(rec: Record, limit: int) -> dict:
    body = {"title": rec.title, "abstract": rec.abstract, "limit": limit}
    if rec.language in ("de", "en"):
        body["language"] = rec.language
    return body


def _learn_body(rec: Record, rid: str) -> dict:
    return {"records": [{"id": rid, "title": rec.title or "(untitled)",
                         "abstract": rec.abstract, "subjects": list(rec.subjects)}]}


async def run_load(url: str, project: str, records: Sequence[Record], *,
                   suggest_requests: int = 1000, learn_requests: int = 100,
                   clients: int = 50, learn_prefix: str = "load", limit: int = 10,
                   timeout: float = 120.0) -> LoadResult:
    """Send the requests and return latencies, errors and what learn committed.

    Suggest bodies cycle through ``records``; learn bodies use records that have subjects
    (those must be in the served vocabulary), under ids ``{learn_prefix}-{i}``.
    """
    learnable = [r for r in records if r.subjects]
    if learn_requests and not learnable:
        raise ValueError("no records with subjects to learn from")
    jobs: list[tuple[str, int]] = [("suggest", i) for i in range(suggest_requests)]
    step = max(1, suggest_requests // max(learn_requests, 1))
    for j in range(learn_requests):  # spread the writes evenly through the reads
        jobs.insert(min(len(jobs), j * (step + 1)), ("learn", j))
    queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    out = LoadResult()
    base = f"{url}{API}/projects/{project}"

    async def client(http: httpx.AsyncClient) -> None:
        while True:
            try:
                kind, i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if kind == "suggest":
                path, body = "/suggest", _suggest_body(records[i % len(records)], limit)
            else:
                rid = f"{learn_prefix}-{i}"
                path, body = "/learn", _learn_body(learnable[i % len(learnable)], rid)
            t = time.perf_counter()
            try:
                res = await http.post(base + path, json=body)
            except httpx.HTTPError as exc:
                out.errors.append(f"{kind} {i}: {type(exc).__name__} {exc}")
                continue
            ms = (time.perf_counter() - t) * 1000
            if res.status_code != 200:
                out.errors.append(f"{kind} {i}: HTTP {res.status_code} {res.text[:200]}")
                continue
            if kind == "suggest":
                out.suggest_ms.append(ms)
            else:
                out.learn_ms.append(ms)
                out.rows_committed += int(res.json()["stored"])
                out.learned_ids.append(body["records"][0]["id"])

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    out.wall_s = time.perf_counter() - t0
    return out


async def run_lean(url: str, project: str, records: Sequence[Record], *,
                   suggest_requests: int = 1000, clients: int = 16, limit: int = 10,
                   timeout: float = 120.0) -> LoadResult:
    """`run_load`'s suggests (no learns) from a lean client: HTTP/1.1 written on asyncio's
    streams, one kept-alive connection per client, the request bodies encoded beforehand.
    A load generator on the machine it measures takes cores from the server: httpx spent
    about 2.3 ms of CPU a request (0.30 of 2 cores at 131 requests/s), this one a small
    fraction of that. Reconnects when the server says ``Connection: close``."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    path = f"{API}/projects/{project}/suggest".encode()
    bodies = [json.dumps(_suggest_body(rec, limit)).encode() for rec in records]
    head = (b"POST " + path + b" HTTP/1.1\r\nHost: " + host.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: ")
    queue = iter(range(suggest_requests))
    out = LoadResult()

    async def exchange(reader, writer, body: bytes) -> tuple[int, bool]:
        writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
        status = int((await reader.readline()).split(b" ", 2)[1])
        length, close = 0, False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        await reader.readexactly(length)
        return status, close

    async def client() -> None:
        conn = None
        for i in queue:
            t = time.perf_counter()
            try:
                if conn is None:
                    conn = await asyncio.open_connection(host, int(port))
                status, close = await asyncio.wait_for(
                    exchange(*conn, bodies[i % len(bodies)]), timeout)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError,
                    IndexError) as exc:
                out.errors.append(f"suggest {i}: {type(exc).__name__} {exc}")
                if conn is not None:
                    conn[1].close()
                conn = None
                continue
            if status != 200:
                out.errors.append(f"suggest {i}: HTTP {status}")
            else:
                out.suggest_ms.append((time.perf_counter() - t) * 1000)
            if close:
                conn[1].close()
                conn = None
        if conn is not None:
            conn[1].close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    out.wall_s = time.perf_counter() - t0
    return out


@dataclass(frozen=True)
class Answer:
    """One request of `run_until`: when it started and ended (seconds on the
    ``time.perf_counter`` clock), its status (0: no answer), the ``X-Model-Version`` and
    ``X-Worker`` headers it came with, and the error when it failed."""

    start: float
    end: float
    status: int
    version: str | None = None
    worker: str | None = None
    error: str | None = None


async def run_until(url: str, project: str, records: Sequence[Record], stop: asyncio.Event,
                    *, clients: int = 16, limit: int = 10, timeout: float = 120.0
                    ) -> list[Answer]:
    """Single-record suggests from ``clients`` concurrent clients, cycling through
    ``records``, until ``stop`` is set: a client starts no request after that, and the
    ones in flight finish. Every request is returned, failed ones too (no retries)."""
    base = f"{url}{API}/projects/{project}/suggest"
    out: list[Answer] = []
    counter = iter(range(1 << 62))

    async def client(http: httpx.AsyncClient) -> None:
        while not stop.is_set():
            body = _suggest_body(records[next(counter) % len(records)], limit)
            t = time.perf_counter()
            try:
                res = await http.post(base, json=body)
            except httpx.HTTPError as exc:
                out.append(Answer(t, time.perf_counter(), 0,
                                  error=f"{type(exc).__name__} {exc}"))
                await asyncio.sleep(0.05)  # a server not answering: do not spin
                continue
            out.append(Answer(t, time.perf_counter(), res.status_code,
                              res.headers.get("x-model-version"), res.headers.get("x-worker"),
                              None if res.status_code == 200 else res.text[:200]))

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return out


__all__ = ["Answer", "LoadResult", "run_load", "run_until"]
