"""What an `InputReport` has to say, on the CLI's console: the skipped items as they come
(the ``tagalign.io.report`` log) and the summary at the end of a run."""

from __future__ import annotations

import logging

from tagalign.cli.app import console
from tagalign.io.report import InputReport
from tagalign.io.report import log as report_log


class _ConsoleWarnings(logging.Handler):
    """``warning: skipped path:line: reason`` on stderr, above any progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            console.print(f"warning: {record.getMessage()}", markup=False, highlight=False,
                          emoji=False, soft_wrap=True)
        except Exception:  # noqa: BLE001 - logging must never break a run
            self.handleError(record)


if not any(isinstance(h, _ConsoleWarnings) for h in report_log.handlers):
    report_log.addHandler(_ConsoleWarnings())
    report_log.propagate = False  # shown once, by the console, not again by the root


def print_summary(report: InputReport) -> None:
    """The end-of-run summary (only when something was skipped or dropped)."""
    summary = report.end_summary()
    if summary is not None:
        console.print(summary, markup=False, highlight=False, emoji=False, soft_wrap=True)
