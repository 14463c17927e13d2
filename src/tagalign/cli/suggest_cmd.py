"""The local path of `tagalign suggest`: predictions stream to ``OUT.partial`` as they are
made, so bad input or a failed/interrupted run never loses finished records (`--resume`
continues). The command itself (options, the Ray branch) is declared in `train_cmd`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from tagalign.cli.app import console, fail
from tagalign.cli.common import progress
from tagalign.evaluate.predictions import PartialExistsError, PredictionStream
from tagalign.project import Project, ProjectError
from tagalign.records import (
    EMPTY_WARNING,
    BadInputError,
    InputReport,
    Record,
    check_record,
    read_records,
)
from tagalign.vocab import VocabularyMismatchError

MAX_WARNINGS_SHOWN = 10


@dataclass
class SuggestCounts:
    """What the summary line reports; `read` counts every well-formed record in the input."""

    read: int = 0
    tagged: int = 0
    empty: int = 0
    truncated: int = 0
    already: int = 0  # in OUT.partial from an earlier run (--resume)
    duplicates: int = 0

    def line(self, report: InputReport) -> str:
        """E.g. ``1000 records read: 997 tagged (2 empty: no suggestions), 3 skipped ...``."""
        tagged = f"{self.tagged} tagged ({self.empty} empty: no suggestions"
        tagged += f", {self.truncated} truncated)" if self.truncated else ")"
        parts = [tagged, f"{report.n_skipped} malformed skipped"]
        if self.already:
            parts.append(f"{self.already} already done (--resume)")
        if self.duplicates:
            parts.append(f"{self.duplicates} repeated ids skipped")
        return f"{self.read} records read: " + ", ".join(parts)


def load_trained(project_dir: Path, mmap: bool = False) -> Project:
    try:
        project = Project.load(project_dir, mmap=mmap)
        if project.recipe is None:
            raise ProjectError(f"project {project_dir} is not trained yet; run `tagalign train`")
    except (ProjectError, VocabularyMismatchError) as exc:
        fail(str(exc))
        raise  # unreachable: fail() exits
    return project


def suggest_one(project: Project, rec: Record, limit: int, threshold: float) -> None:
    rows, warning = project.suggest_with_warnings([rec], limit, threshold)[0]
    if warning:
        console.print(f"[yellow]warning:[/] {warning}")
    if rows:
        print_suggestions(rows)


def suggest_file(project: Project, input: Path, output: Path, *, limit: int, threshold: float,
                 batch_size: int, strict: bool, resume: bool) -> None:
    """Tag every record of ``input`` into ``output``; exit status 1 on a failed run or a
    malformed record under ``strict``, 130 on Ctrl-C, 0 otherwise."""
    if not input.exists():
        fail(f"records not found: {input}")
    stream = PredictionStream(output, resume=resume)
    try:
        stream.open()
    except PartialExistsError as exc:
        fail(str(exc))
    counts = SuggestCounts()
    if stream.done:
        console.log(f"resuming: {len(stream.done)} records already in {stream.partial}")
    report = InputReport(strict=strict)
    try:
        _tag_all(project, input, stream, report, counts, limit, threshold, batch_size)
    except BaseException as exc:
        stream.close()
        console.print(counts.line(report), soft_wrap=True)
        how = (f"{stream.written + counts.already} finished records are kept in "
               f"{stream.partial}; run the same command with --resume to continue")
        if isinstance(exc, KeyboardInterrupt):
            fail(f"interrupted; {how}", code=130)
        if isinstance(exc, BadInputError):
            fail(f"{exc} (--strict stops here); {how} once the input is fixed")
        if isinstance(exc, SystemExit):
            raise
        fail(f"{type(exc).__name__}: {exc}; {how}")
    stream.commit()
    console.print(counts.line(report), soft_wrap=True)
    console.log(f"predictions written to {output}")


def _tag_all(project: Project, input: Path, stream: PredictionStream, report: InputReport,
             counts: SuggestCounts, limit: int, threshold: float, batch_size: int) -> None:
    t0 = time.perf_counter()
    shown = 0
    with progress() as bar:
        task = bar.add_task("suggesting", total=None, rate="")

        def run(chunk: list[Record]) -> None:
            nonlocal shown
            for rec, (row, warning) in zip(chunk, project.suggest_with_warnings(
                    chunk, limit, threshold), strict=True):
                warning = cut.pop(rec.id, None) or warning
                stream.write(rec.id, row)
                counts.tagged += 1
                if warning:
                    counts.empty += warning == EMPTY_WARNING
                    counts.truncated += warning != EMPTY_WARNING
                    shown += 1
                    if shown <= MAX_WARNINGS_SHOWN:
                        console.print(f"[yellow]warning:[/] record {rec.id}: {warning}",
                                      soft_wrap=True)
            stream.flush()  # every finished batch is on disk before the next one starts
            rate = counts.tagged / max(time.perf_counter() - t0, 1e-9)
            bar.update(task, completed=counts.tagged, rate=f"{rate:.0f} rec/s")

        chunk: list[Record] = []
        pending: set[str] = set()  # ids in `chunk`
        cut: dict[str, str] = {}  # truncation warnings of the records in `chunk`
        resumed = set(stream.done)  # ids finished by an earlier run
        try:
            for rec in read_records(input, report=report):
                counts.read += 1
                if rec.id in pending or (rec.id in stream.done and rec.id not in resumed):
                    counts.duplicates += 1
                elif rec.id in resumed:
                    counts.already += 1
                else:
                    pending.add(rec.id)
                    # cut huge texts now, not when the batch is tagged: a batch of 20 MB
                    # abstracts would otherwise sit in memory whole
                    rec, warning = check_record(rec)
                    if warning is not None and warning != EMPTY_WARNING:
                        cut[rec.id] = warning
                    chunk.append(rec)
                    if len(chunk) >= batch_size:
                        run(chunk)
                        chunk, pending = [], set()
        except BadInputError:  # --strict: the records before the bad one are still tagged
            if chunk:
                run(chunk)
            raise
        if chunk:
            run(chunk)


def print_suggestions(rows) -> None:
    table = Table("#", "subject", "label", "score", "reasons")
    for i, s in enumerate(rows, 1):
        why = ", ".join(s.reasons.get("sources", []))
        if "label_match" in s.reasons:
            why += f"; label '{s.reasons['label_match']}'"
        if s.reasons.get("neighbours"):
            why += f"; {len(s.reasons['neighbours'])} similar records"
        table.add_row(str(i), s.id, s.label, f"{s.score:.3f}", why)
    console.print(table)
