"""Helpers shared by CLI commands: reading records with progress, parsing options."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tagalign.batch import DEFAULT_MAX_ERRORS, BatchResult, get_engine, run_batch
from tagalign.cli.app import console, refuse
from tagalign.cli.report import print_summary
from tagalign.encode.base import ProgressLog
from tagalign.io import read_json_input
from tagalign.records import InputReport, Record, read_records
from tagalign.records.marc.provenance import Provenance
from tagalign.runtime import CACHE_ENV, Runtime
from tagalign.vocab import Vocabulary, load_vocabulary
from tagalign.vocab.loaders import guess_format

log = logging.getLogger("tagalign.cli")

#: help of ``--compile-ranker`` (suggest, serve)
COMPILE_HELP = ("Score with the ranker's trees compiled to native code (lleaves; the same "
                "scores within 1e-12, a tenth of the CPU). Decided when the project loads; the "
                "first load of a model on a machine compiles it (seconds), later ones read "
                f"the cached object from ${CACHE_ENV}.")


def make_runtime(threads: int, compile_ranker: bool = False) -> Runtime:
    """The one `Runtime` of a command, from its options (``--threads``, 0: not given;
    ``--compile-ranker``) and the environment as the process started (`environment`: the
    default threads and the cache folder); pins the process's libraries to ``threads``
    (0 leaves the defaults). Every command that runs models makes it here, once."""
    return Runtime(threads=threads, compile_ranker=compile_ranker).apply()


#: help of ``--mmap`` (serve, suggest): what it does and what it costs
MMAP_HELP = ("Map the model's large arrays (vector indexes, record matrices, label lists) "
             "from its files instead of reading them into memory: less memory, shared by "
             "processes on one machine; the first queries read from disk, and the project "
             "is read-only (no learning).")


def progress(transient: bool = False) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                    console=console, transient=transient)


def read_vocabulary(source: Path, report: InputReport, fmt: str | None = None,
                    option: str | None = None, entity_types: str | None = None
                    ) -> Vocabulary:
    """`load_vocabulary` of ``source`` as every command shows it (`vocab load`, `vocab
    show`, `train --vocab`): the GND authority dump, which takes minutes, under a bar of
    the file's bytes read with the time left; any other format under a spinner.
    ``option``: the option that names a format (`guess_format`'s, `load_vocabulary`'s)."""
    dump = (fmt or (source.exists() and guess_format(source, option))) == "gnd-marc"
    bar = progress(transient=True)
    with bar if dump else console.status(f"loading {source} …"):
        return load_vocabulary(source, format=fmt, report=report, option=option,
                               entity_types=entity_types,
                               progress=PhaseBars(bar) if dump else None)


#: help of ``--subjects`` (train; eval adds ``machine``)
SUBJECTS_HELP = ("MARC records: which subjects are gold, by the 883 linked to them: "
                 "intellectual (chosen by a person, or no 883 says otherwise), or confirmed "
                 "(those and the machine suggestions a librarian accepted). Machine-made "
                 "ones never train a tagger.")


def gold_kind(value: str, option: str = "--subjects", *,
              machine: bool = False) -> Provenance:
    """The `Provenance` named by ``--subjects`` (``machine`` only where ``machine`` allows
    it: eval may score against a machine's subjects, train never learns from them)."""
    allowed = [Provenance.INTELLECTUAL, Provenance.CONFIRMED]
    allowed += [Provenance.MACHINE] if machine else []
    if value not in allowed:
        why = (": machine-made subjects never train a tagger"
               if value == Provenance.MACHINE else "")
        refuse(f"{option} {value!r}: use {' or '.join(allowed)}{why}")
    return Provenance(value)


def iter_records(path: Path, *, vocab=None, strict: bool = False, limit: int | None = None,
                 report: InputReport | None = None,
                 gold: Provenance = Provenance.INTELLECTUAL, processes: bool = False
                 ) -> Iterator[Record]:
    """Stream records, then print what was skipped; a missing file or a strict-mode error
    raises the package's error (`tagalign.cli.app.TagalignGroup` prints it). ``gold``,
    ``processes``: see `tagalign.records.read_records`."""
    report = report or InputReport(strict=strict)
    yield from read_records(path, report=report, vocab=vocab, limit=limit, gold=gold,
                            processes=processes)
    print_summary(report)


def load_records(path: Path, *, vocab=None, strict: bool = False, limit: int | None = None,
                 description: str = "reading records",
                 gold: Provenance = Provenance.INTELLECTUAL) -> list[Record]:
    out: list[Record] = []
    with progress(transient=True) as bar:
        task = bar.add_task(f"{description} ({Path(path).name})", total=limit, rate="")
        for rec in iter_records(path, vocab=vocab, strict=strict, limit=limit, gold=gold):
            out.append(rec)
            if len(out) % 1000 == 0:
                bar.update(task, completed=len(out))
    console.log(f"{len(out)} records from {path}")
    return out


def parse_params(pairs: list[str] | None, config: Path | None) -> dict[str, Any]:
    """Recipe parameters from ``--config FILE.json`` and repeated ``--param key=value``."""
    params: dict[str, Any] = {}
    if config is not None:
        params.update(read_json_input(Path(config), "--config"))
    for pair in pairs or []:
        if "=" not in pair:
            refuse(f"--param {pair!r}: expected key=value")
        key, raw = pair.split("=", 1)
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


# help texts are rich markup: "\\[" keeps the extra's brackets from being read as a tag
ENGINE_HELP = "local (this process) or ray (Ray Data workers; pip install 'tagalign\\[ray]')."
SHARD_HELP = ("Records per shard (the unit of resuming); default: about 4 shards per worker, "
              "50 to 5,000 records each.")
MAX_ERRORS_HELP = ("Share of a shard's records that may fail (their reasons in errors-*.jsonl) "
                   "before the shard counts as failed: not marked done, exit status 1.")
ADDRESS_HELP = ("Ray cluster: auto, ray://host:10001 (default: $RAY_ADDRESS, else a Ray "
                "started here).")


def run_sharded(spec: dict[str, Any], src: Path, out: Path, *, engine: str,
                address: str | None, num_workers: int | None, shard_size: int | None,
                overwrite: bool = False, max_errors: float = DEFAULT_MAX_ERRORS) -> None:
    """Run a batch task with one progress bar; user errors end in a one-line message, and
    so does a run with failed shards (exit status 1)."""

    eng = get_engine(engine, address=address, num_workers=num_workers)
    t0 = time.perf_counter()
    with progress() as bar:
        # shown once the input is planned, so an error before that is one clean line
        task = bar.add_task(f"{spec['task']} ({engine})", total=None, rate="", visible=False)
        state = {"done": 0, "base": 0}

        def on_plan(total: int, already: int) -> None:
            state["done"] = state["base"] = already
            bar.update(task, total=total, completed=already, visible=True)

        def on_shard(summary: dict[str, Any]) -> None:
            state["done"] += summary["records_in"]
            rate = (state["done"] - state["base"]) / max(time.perf_counter() - t0, 1e-9)
            bar.update(task, completed=state["done"], rate=f"{rate:.0f} rec/s")

        res = run_batch(spec, src, out, eng, shard_size=shard_size, overwrite=overwrite,
                        max_errors=max_errors, on_plan=on_plan, on_shard=on_shard)
    log_shards(res, out, eng.planned_workers())
    res.check(max_errors)


def log_shards(res: BatchResult, out: Path, planned_workers: int) -> None:
    """What a sharded run did (`encode` and `suggest` on an engine), on stderr."""
    skipped = f", {res.shards_skipped} already done" if res.shards_skipped else ""
    console.log(f"{res.shards_run} shards run{skipped}: {res.records_out} records written, "
                f"{res.errors} errors, {res.workers} worker(s), "
                f"{res.seconds:.1f} s → {out}")
    if res.shards_run and res.workers < planned_workers:
        console.log(f"{res.workers} worker(s), not {planned_workers}: only "
                    f"{res.shards_run} shard(s) to run (--shard-size splits the input finer)")
    if res.errors:
        console.log(f"[yellow]{res.errors} records failed[/]; their ids and reasons are in "
                    f"{out}/errors-*.jsonl")


class PhaseBars:
    """The one CLI adapter of `tagalign.runtime.ProgressCallback`: a rich bar per phase,
    fed ``(phase, done, total)``, with the time left. ``remove_done``: a finished phase's
    bar goes (except the phases named in ``keep``). On a console that is no terminal (a log
    file), where rich draws the bars only when the command ends, each phase's progress is
    also logged as the library logs its own (`tagalign.encode.base.log_progress`: every
    ``every`` seconds, with the time left)."""

    def __init__(self, bar: Progress, remove_done: bool = False, keep: tuple[str, ...] = (),
                 every: float = 10.0):
        self.bar = bar
        self.tasks: dict[str, TaskID] = {}
        self.remove_done, self.keep = remove_done, keep
        self.t0 = time.perf_counter()
        self.logged = None if bar.console.is_terminal else ProgressLog(log, every)

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.logged is not None:
            self.logged(phase, done, total)
        if phase not in self.tasks:
            self.tasks[phase] = self.bar.add_task(phase, total=total, rate="")
        self.bar.update(self.tasks[phase], completed=done, total=total,
                        rate=f"{time.perf_counter() - self.t0:.0f} s")
        if self.remove_done and done >= total and phase not in self.keep:
            self.bar.remove_task(self.tasks.pop(phase))
