"""The soak's feedback store and what happens to it (issue 64; `benchmarks/faults/soak.py`
runs the load): a real PostgreSQL cluster whose data folder is on a size-limited tmpfs of
its own (`tests/faultkit.py`), and at fixed fractions of the run (`EVENTS`, so a short
run goes through the same sequence) the cluster is stopped and started again ("taken
away" and "given back"), or the tmpfs filled with a file and freed, each for `OUTAGE` of
the run (5 minutes of an hour).

While the store is away or full, the requests that need it (learns, the review queue,
`STORE_KINDS`) may answer 503 or 507: "refused while away", counted apart, from the
moment it goes until the first learn acknowledged after it came back (how long that took
is reported); a 503 or 507 at any other time, any other answer but 200, and a suggest
failing at any time are failures. ``GET /tagalign/v1/health`` is sampled: when its answer
has a ``status``, how often it said ``degraded`` during outages and outside them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

#: what happens to the store, at which fraction of the run
EVENTS = (("away", 0.20), ("full", 0.40), ("away", 0.60))
#: how long each lasts, as a fraction of the run
OUTAGE = 5 / 60
#: the requests that need the store: they may be refused while it is away
STORE_KINDS = frozenset({"learn", "queue"})
REFUSED = frozenset({503, 507})
#: the store's tmpfs: room for an hour of decisions, WAL kept small (`SoakStore`)
DISK_BYTES = 1 << 30


@dataclass
class Outage:
    kind: str  # "away": the cluster stopped; "full": its disk filled
    start: float  # seconds since the load began
    back: float  # given back (started, freed)
    note: str = ""  # what else was needed (the cluster started again after the fill)
    recovered: float | None = None  # the end of the first learn acknowledged after ``back``


class SoakStore:
    """A PostgreSQL cluster (Debian's binaries, `tests.faultkit.PostgresCluster`) with its
    folder on a `DISK_BYTES` tmpfs at ``path`` (root only), an empty database ``soak``."""

    def __init__(self, path: Path):
        from tests.faultkit import PostgresCluster, SmallDisk

        self.disk = SmallDisk(path, DISK_BYTES)
        self.pg = None
        try:
            self.pg = PostgresCluster(under=self.disk.path).start()
            self.url = self.pg.database("soak")
            import psycopg

            with psycopg.connect(self.pg.url, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET max_wal_size = '96MB'")
                conn.execute("SELECT pg_reload_conf()")
        except BaseException:
            self.close()
            raise

    def take_away(self) -> None:
        self.pg.stop()

    def give_back(self) -> str:
        self.pg.start()
        return ""

    def fill(self) -> None:
        self.disk.fill()

    def free(self) -> str:
        """Free the disk; start the cluster again if the full disk stopped it."""
        self.disk.free()
        if self.pg.running():
            return ""
        self.pg.start()
        return "PostgreSQL had stopped on the full disk: started again"

    def stored_requests(self) -> Counter:
        """Record id → the learn requests stored for it (one request's rows share their
        time)."""
        import psycopg

        with psycopg.connect(self.url) as conn:
            rows = conn.execute("SELECT record_id, count(DISTINCT created) FROM decisions "
                                "GROUP BY record_id").fetchall()
        return Counter(dict(rows))

    def close(self) -> None:
        if self.pg is not None:
            self.pg.close()
        self.disk.close()

    def __enter__(self) -> SoakStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def _until(stop: asyncio.Event, t0: float, due: float) -> bool:
    """Wait until ``due`` s after ``t0``; whether the run stopped first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, due - (time.perf_counter() - t0)))
    return stop.is_set()


async def outages(store: SoakStore, seconds: float, stop: asyncio.Event, t0: float,
                  seen: list[Outage]) -> None:
    """`EVENTS` on ``store``, each for `OUTAGE` of ``seconds`` from when it is done (the
    cluster stopped, the disk full), into ``seen`` (one going on when the run stops is
    given back then)."""
    for kind, at in EVENTS:
        if await _until(stop, t0, at * seconds):
            return
        await asyncio.to_thread(store.take_away if kind == "away" else store.fill)
        start = time.perf_counter() - t0
        await _until(stop, t0, start + OUTAGE * seconds)
        note = await asyncio.to_thread(store.give_back if kind == "away" else store.free)
        seen.append(Outage(kind, start, time.perf_counter() - t0, note))


async def health(url: str, every: float, stop: asyncio.Event, t0: float,
                 seen: list[tuple[float, str]]) -> None:
    """``GET /tagalign/v1/health`` every ``every`` s: (seconds, its status) into ``seen``
    while it has one (a server without a ``status`` is not sampled)."""
    async with httpx.AsyncClient(timeout=30) as http:
        while True:
            at = time.perf_counter() - t0
            try:
                got = (await http.get(f"{url}/tagalign/v1/health")).json()
                status = got.get("status") if isinstance(got, dict) else None
            except (httpx.HTTPError, ValueError):
                status = "no answer"
            if status is None:
                return
            seen.append((at, str(status)))
            try:
                await asyncio.wait_for(stop.wait(), every)
                return
            except TimeoutError:
                pass


def settle(calls: list, seen: list[Outage]) -> None:
    """Each outage's ``recovered``: the end of the first learn started after it was given
    back and answered 200 (None: learning never came back)."""
    for o in seen:
        o.recovered = min((c.end for c in calls if c.kind == "learn" and c.status == 200
                           and c.start >= o.back), default=None)


def refused_while_away(call, seen: list[Outage]) -> bool:
    """A store's request refused (503, 507) while an outage of ``seen`` lasted: from its
    start until learning came back (the request in flight then too)."""
    return call.kind in STORE_KINDS and call.status in REFUSED and any(
        call.end >= o.start and call.start <= (o.recovered if o.recovered is not None
                                               else float("inf")) for o in seen)


def _during(t: float, seen: list[Outage]) -> bool:
    return any(o.start <= t <= (o.recovered or o.back) for o in seen)


def health_figures(samples: list[tuple[float, str]], seen: list[Outage]) -> dict | None:
    """How often /health said degraded during the outages (until learning came back) and
    outside them: (degraded, samples) each (None: its answer has no status)."""
    if not samples:
        return None
    inside = [s for t, s in samples if _during(t, seen)]
    outside = [s for t, s in samples if not _during(t, seen)]
    return {"during": (inside.count("degraded"), len(inside)),
            "outside": (outside.count("degraded"), len(outside)),
            "statuses": dict(Counter(s for _, s in samples))}


__all__ = ["EVENTS", "OUTAGE", "STORE_KINDS", "Outage", "SoakStore", "health",
           "health_figures", "outages", "refused_while_away", "settle"]
