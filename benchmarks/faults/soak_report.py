"""The soak's figures (`benchmarks/faults/soak.py` names them) and its printed tables: the
run's totals, what happened to the feedback store, and p95 latency by tenth of the run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.faults.common import report
from benchmarks.faults.soak import Call, Soak
from benchmarks.faults.soak_store import OUTAGE, health_figures, refused_while_away


def p95(calls: list[Call]) -> int | None:
    ms = [(c.end - c.start) * 1000 for c in calls if c.status == 200]
    return round(float(np.percentile(ms, 95))) if ms else None


def workers_rss(soak: Soak, workers: int) -> list[tuple[float, float, float]]:
    """(seconds, mean, max) RSS of the workers at each sample with ``workers`` of them (a
    reload replaces them one at a time: a sample taken meanwhile may list one more)."""
    return [(t, float(np.mean(w)), max(w)) for t, sample in soak.rss
            if len(w := list(sample.values())[1:]) == workers]


def growth(samples: list[tuple[float, float]], d: float) -> tuple:
    """(MiB at the start, at 60 % of ``d`` seconds, at the end, growth % over the last
    40 %) of ``(seconds, MiB)`` samples."""
    mid = min(samples, key=lambda s: abs(s[0] - 0.6 * d))[1]
    end = samples[-1][1]
    return round(samples[0][1]), round(mid), round(end), round(100 * (end - mid) / mid, 1)


def processes(soak: Soak) -> dict[int, tuple[float, float, float, float]]:
    """Each process sampled: (first seen s, its RSS then, last seen s, its RSS then)."""
    out: dict[int, tuple[float, float, float, float]] = {}
    for t, sample in soak.rss:
        for pid, mib in sample.items():
            first = out.get(pid, (t, mib))[:2]
            out[pid] = (*first, t, mib)
    return out


def _by(calls: list[Call]) -> dict[str, int]:
    return dict(sorted(Counter(f"{c.kind} {c.status}" for c in calls).items()))


def summary(soak: Soak, stored: Counter, workers: int = 2) -> dict:
    """The figures `benchmarks/faults/soak.py` names; ``stored``: record id → learn requests
    stored for it (`SoakStore.stored_requests`)."""
    d = soak.seconds
    refused = [c for c in soak.calls if refused_while_away(c, soak.outages)]
    away = {id(c) for c in refused}
    failed = [c for c in soak.calls if c.status != 200 and id(c) not in away]
    bad = {id(c) for c in failed}
    tenths = []
    for i in range(10):
        calls = [c for c in soak.calls if i * d / 10 <= c.start < (i + 1) * d / 10]
        tenths.append((len(calls), sum(id(c) in bad for c in calls),
                       sum(id(c) in away for c in calls),
                       p95([c for c in calls if c.kind == "suggest"]), p95(calls)))
    events = [(o, sum(c.end >= o.start and c.start <= (o.recovered or o.back)
                      for c in refused)) for o in soak.outages]
    per_worker = workers_rss(soak, workers)
    rss = {"supervisor": growth([(t, next(iter(x.values()))) for t, x in soak.rss], d),
           "workers' mean": growth([(t, m) for t, m, _ in per_worker], d),
           "workers' max": growth([(t, m) for t, _, m in per_worker], d)}
    return {
        "minutes": round(d / 60, 1), "requests": len(soak.calls),
        "by_kind": dict(Counter(c.kind for c in soak.calls)), "failed": len(failed),
        "failed_by": _by(failed), "failed_examples": [c.error for c in failed[:5]],
        "refused": len(refused), "refused_by": _by(refused), "events": events,
        "acked": sum(soak.acked.values()), "acked_ids": len(soak.acked),
        "lost": sum(max(0, n - stored[rid]) for rid, n in soak.acked.items()),
        "health": health_figures(soak.health, soak.outages),
        "reloads": len(soak.reloads), "reloads_failed": sum(e is not None for *_, e in
                                                           soak.reloads),
        "reload_at": [(round(a), round(s, 1)) for a, s, _ in soak.reloads],
        "reloads_failed_away": sum(e is not None and any(
            a + s >= o.start and a <= o.back for o in soak.outages) for a, s, e in soak.reloads),
        "reload_errors": [e for *_, e in soak.reloads if e is not None][:3],
        "warm_up": soak.warm_up, "rss": rss, "processes": processes(soak), "tenths": tenths,
    }


def _n(x) -> str:
    return "–" if x is None else f"{x:,}"


def print_soak(soak: Soak, stored: Counter, project: Path, clients: int, load: float) -> dict:
    """Print the soak's tables (Markdown) and its row; the `summary`."""
    s = summary(soak, stored)
    print(f"\nsoak of {project}: {s['minutes']} min, {clients} clients, 2 workers, the store "
          f"a PostgreSQL on its own tmpfs (load {load:.1f} at the end)\n")
    h = s["health"]
    health = ("no status in its answer" if h is None else
              f"{h['during'][0]} of {h['during'][1]} samples during outages, {h['outside'][0]} "
              f"of {h['outside'][1]} outside {h['statuses']}")
    rows = [("requests", f"{s['requests']:,} {s['by_kind']}", ""),
            ("failed (kind status: n)", f"{s['failed']} {s['failed_by']}", "0"),
            ("refused while away (kind status: n)", f"{s['refused']:,} {s['refused_by']}",
             "counted apart"),
            ("learns acknowledged (requests, ids)", f"{s['acked']:,}, {s['acked_ids']}", ""),
            ("acknowledged learns not in the store", str(s["lost"]), "0"),
            ("reloads (at s, took s)", f"{s['reloads']}, {s['reloads_failed']} failed "
             f"({s['reloads_failed_away']} while the store was away) {s['reload_at']}",
             "0 failed"),
            ("warm-up, not counted (requests, failed)", str(s["warm_up"]), ""),
            ("/health said degraded", health, "")]
    rows += [(f"{what} RSS MiB start, 60 %, end: growth last 40 %",
              f"{a:,}, {m:,}, {e:,}: {g:+.1f} %", "≤ 5 %" if what != "supervisor" else "")
             for what, (a, m, e, g) in s["rss"].items()]
    print("| figure | value | target |\n|---|---|---|")
    print("\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows))
    print(f"\n| store event ({OUTAGE * 60 * s['minutes']:.0f} s each) | at s | given back "
          "at s | refused | first learn acknowledged, s after | note |\n|---|---|---|---|---|---|")
    for o, n in s["events"]:
        after = "never" if o.recovered is None else f"{o.recovered - o.back:.1f}"
        what = "store taken away" if o.kind == "away" else "its disk filled"
        print(f"| {what} | {o.start:.0f} | {o.back:.0f} | {n:,} | {after} | {o.note} |")
    print("\n| tenth | requests | failed | refused | p95 single suggest ms | p95 all ms |\n"
          "|---|---|---|---|---|---|")
    for i, (n, bad, ref, p_s, p_a) in enumerate(s["tenths"], 1):
        print(f"| {i} | {n:,} | {bad} | {ref:,} | {_n(p_s)} | {_n(p_a)} |")
    for err in s["failed_examples"]:
        print(f"  failed: {err}")
    for err in s["reload_errors"]:
        print(f"  reload failed: {err}")
    print("  each process (seconds: RSS MiB first and last seen): " + "; ".join(
        f"{pid} {a:.0f} s: {ra:.0f} -> {b:.0f} s: {rb:.0f}"
        for pid, (a, ra, b, rb) in s["processes"].items()), flush=True)
    (_, _, _, f_s, _), (_, _, _, l_s, _) = s["tenths"][0], s["tenths"][-1]
    report("soak", len(s["events"]), sum(o.recovered is not None for o, _ in s["events"]),
           s["lost"], requests=s["requests"], failed=s["failed"], refused=s["refused"],
           workers_rss_growth_pct=s["rss"]["workers' max"][3], p95_suggest_ms=f"{f_s}->{l_s}")
    return s


__all__ = ["print_soak", "summary"]
