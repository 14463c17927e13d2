"""A pytest plugin (loaded by conftest.py): the run ends with how many tests were skipped
and why, grouped by reason; with ``CI=true`` any skip fails the run, so a CI machine that
lacks the shared data, chromium or PostgreSQL cannot pass by skipping them."""

from __future__ import annotations

import os
from collections import Counter

import pytest

SKIPS: Counter[str] = Counter()  # reason -> number of skipped tests, for this session


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 \
        else str(longrepr)
    return text.removeprefix("Skipped: ").strip() or "(no reason given)"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def pytest_configure(config: pytest.Config) -> None:
    SKIPS.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # an xfail is reported as skipped with ``wasxfail``: it is not a skip
    if report.skipped and not hasattr(report, "wasxfail"):
        SKIPS[_reason(report)] += 1


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:  # a whole module skipped at import (module-level skip/importorskip)
        SKIPS[f"{_reason(report)} (all of {report.nodeid})"] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if in_ci() and SKIPS and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    total = sum(SKIPS.values())
    if not total:
        return
    tests = f"{total} test{'s' if total != 1 else ''}"
    tr = terminalreporter
    tr.section(f"{tests} skipped", sep="=", yellow=True)
    for reason, count in sorted(SKIPS.items(), key=lambda kv: (-kv[1], kv[0])):
        tr.write_line(f"{count:5d} x {reason}")
    if in_ci():
        tr.write_line(f"CI=true: FAILED because {tests} skipped (a CI run must skip nothing)",
                      red=True, bold=True)
