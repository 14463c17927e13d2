"""The soak's accounting (`benchmarks/faults/soak_report.py`, `soak_store.py`; the soak
itself runs for minutes on a real PostgreSQL: `python -m benchmarks.faults --only soak`):
a store's request refused while the store is away is counted apart, the same refusal at
another time or any other request failing is a failure, and an acknowledged learn request
not stored is lost even when its record id was stored for another request."""

from __future__ import annotations

from collections import Counter

from benchmarks.faults.soak import Call, Soak
from benchmarks.faults.soak_report import summary
from benchmarks.faults.soak_store import Outage, health_figures, settle


def _soak() -> Soak:
    calls = [Call("learn", 1, 2, 200), Call("suggest", 3, 4, 200),
             Call("learn", 10, 11, 503), Call("queue", 12, 13, 503),  # away: refused
             Call("suggest", 14, 15, 503),  # a suggest fails at any time
             Call("learn", 20.5, 21, 503),  # given back at 20, not yet learning: refused
             Call("learn", 21, 22, 200),  # learning again: 2 s after
             Call("learn", 30, 31, 503),  # after learning came back: a failure
             Call("learn", 40, 41, 500),  # not a refusal: a failure
             Call("learn", 50, 51, 507), Call("learn", 54, 55, 200)]  # disk full, then freed
    rss = [(t, {1: 100.0, 2: 50.0, 3: 50.0}) for t in (0, 60, 100)]
    soak = Soak(calls, Counter({"a": 2, "b": 1}), rss, [(18, 3, "HTTP 409"), (70, 3, None)],
                100, outages=[Outage("away", 9, 20), Outage("full", 49, 52)],
                health=[(10, "degraded"), (19, "ok"), (30, "ok"), (60, "degraded")])
    settle(soak.calls, soak.outages)
    return soak


def test_refusals_count_apart_only_while_the_store_is_away():
    soak = _soak()
    assert [o.recovered for o in soak.outages] == [22, 55]
    s = summary(soak, Counter({"a": 1, "b": 1}))
    assert s["refused_by"] == {"learn 503": 2, "learn 507": 1, "queue 503": 1}
    assert s["failed_by"] == {"learn 500": 1, "learn 503": 1, "suggest 503": 1}
    assert (s["requests"], s["acked"], s["acked_ids"]) == (11, 3, 2)
    assert s["lost"] == 1  # "a" acknowledged twice, stored once
    assert [n for _, n in s["events"]] == [3, 1]
    assert (s["reloads_failed"], s["reloads_failed_away"]) == (1, 1)
    assert [t[:3] for t in s["tenths"][:3]] == [(2, 0, 0), (3, 1, 2), (2, 0, 1)]


def test_health_degraded_during_and_outside_outages():
    soak = _soak()
    assert health_figures(soak.health, soak.outages) == {
        "during": (1, 2), "outside": (1, 2), "statuses": {"degraded": 2, "ok": 2}}
    assert health_figures([], soak.outages) is None
