"""Tag a file (`tagalign suggest --input … --output …`): every record of a file tagged as one
`SuggestRequest` asks, written to a predictions file as it is made.

Locally the predictions stream to ``OUT.partial`` batch by batch (JSONL, or MARC with the
suggested 650/883 fields), renamed to OUT at the end; a failed or interrupted run keeps
what it finished there, and ``resume`` tags only the records not yet written. With
``engine="ray"`` (or ``format="parquet"``) OUT is a folder of shards with a manifest,
tagged by `tagalign.batch` workers that load the project themselves (resumable shard by
shard). Which options go together is checked by `TagFileOptions` before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tagalign.batch import DEFAULT_MAX_ERRORS, BatchResult, get_engine, run_batch
from tagalign.errors import (
    InputError,
    MissingFileError,
    NoSpaceError,
    TagalignError,
    is_no_space,
)
from tagalign.io import BadInputError, InputReport
from tagalign.predictions import (
    PartialExistsError,
    PredictionStream,
    TagCounts,
    open_prediction_stream,
    output_format,
    review_path,
    tag_records,
)
from tagalign.project import Project, Tagger
from tagalign.project.jobs import DEFAULT_JOBS, TaggingJobs
from tagalign.records import read_records
from tagalign.records.loaders import guess_format
from tagalign.records.marc.reader import iter_marc_records
from tagalign.runtime import Runtime
from tagalign.suggest import PROJECT_DEFAULTS, SuggestRequest

#: the output formats: JSONL or MARC of a local run, JSONL or Parquet shards of a sharded one
OUTPUT_FORMATS = ("jsonl", "parquet", "marc", "marcxml")


@dataclass(frozen=True)
class TagFileOptions:
    """How `tag_file` reads, writes and runs (the request says what is suggested). The
    combinations are checked here (`InputError`, the messages of `tagalign suggest`).

    ``format``: jsonl, marc (binary MARC 21), marcxml, or parquet (shards; default: by the
    output's name, .mrc/.marc, .xml, else jsonl). ``engine``: local, or ray (a folder of
    shards; ``address``, ``num_workers``, ``shard_size``, ``max_errors`` are its). ``resume``:
    keep what ``OUT.partial`` holds and tag the rest (without it an existing one is refused).
    ``strict``: stop at the first malformed record. ``jobs``: processes tagging side by side,
    forked after the model loaded (0: one per core). ``merge`` (MARC in and out): each input
    record written whole with the suggested fields added; ``agency``: 883 $q.
    ``release_above``: only records whose estimated recall reaches it go to the output, the
    rest to ``review`` (default: the output with ``.review`` before the suffix).
    ``domains``: a domain model folder attached to the project, each record's domains
    written beside its subjects. ``mmap``: the project's large arrays mapped from its files
    (when the project is given as a folder, and in the ray workers)."""

    format: str | None = None
    engine: str = "local"
    resume: bool = False
    strict: bool = False
    batch_size: int = 512
    jobs: int = DEFAULT_JOBS
    merge: bool = False
    agency: str | None = None
    release_above: float | None = None
    review: Path | None = None
    domains: Path | None = None
    mmap: bool = False
    address: str | None = None
    num_workers: int | None = None
    shard_size: int | None = None
    max_errors: float = DEFAULT_MAX_ERRORS

    def __post_init__(self) -> None:
        for name in ("review", "domains"):  # a str from Python is a path too
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, Path(getattr(self, name)))
        if self.engine not in ("local", "ray") or self.format not in (None, *OUTPUT_FORMATS):
            raise InputError(f"--engine takes local or ray; --format takes "
                             f"{', '.join(OUTPUT_FORMATS)}")
        if self.review is not None and self.release_above is None:
            raise InputError("--review goes with --release-above")
        if self.sharded:
            if self.release_above is not None:
                raise InputError("--release-above works with --engine local and JSONL output")
            if self.format in ("marc", "marcxml") or self.merge or self.agency is not None:
                raise InputError("MARC output (--format marc/marcxml, --merge, --agency) works "
                                 "with --engine local; --engine ray writes jsonl or parquet "
                                 "shards")

    @property
    def sharded(self) -> bool:
        """The output is a folder of shards (`tagalign.batch`), not one file."""
        return self.engine == "ray" or self.format == "parquet"

    def output_format(self, output: Path | str | None, input: Path | str | None = None) -> str:
        """The format a local run writes ``output`` in, checked against ``merge`` and
        ``agency`` (``merge`` reads ``input``: it must be MARC)."""
        if output is None:
            if self.merge or self.agency is not None or self.format is not None:
                raise InputError("--format, --merge and --agency go with --output")
            return "jsonl"
        fmt = output_format(output, self.format)
        if fmt == "jsonl" and (self.merge or self.agency is not None):
            raise InputError("--merge and --agency go with MARC output: --format marc or "
                             "marcxml, or an --output named .mrc or .xml")
        if self.merge and (input is None or Path(input).is_dir()
                           or guess_format(Path(input)) != "marc"):
            raise InputError(f"--merge needs MARC input (binary or MARC-XML); {input} is not")
        return fmt


class TagFileProgress:
    """What `tag_file` tells while it runs; each method does nothing here (the CLI's shows
    a progress bar and log lines). ``start`` comes once the work begins (after the jobs are
    forked: no thread of the caller's may run before), ``stop`` when it ends, however."""

    def start(self, sharded: bool) -> None:
        """The work begins."""

    def stop(self) -> None:
        """The work ended (finished or not)."""

    def resumed(self, already: int, partial: Path) -> None:
        """A local run continues one whose ``already`` records are kept in ``partial``."""

    def batch(self, counts: TagCounts) -> None:
        """A local run wrote one more batch."""

    def warning(self, record_id: str, warning: str) -> None:
        """A record was empty or cut (`tagalign.records.check_record`)."""

    def planned(self, total: int, already: int) -> None:
        """A sharded run planned ``total`` records, ``already`` of them done by earlier runs."""

    def shard(self, summary: dict[str, Any]) -> None:
        """A sharded run finished one shard (``summary["records_in"]`` records)."""


@dataclass(frozen=True)
class TaggedFile:
    """What `tag_file` did (so far, for `TaggingStopped`)."""

    #: the predictions: a file, or the folder of shards of a sharded run
    output: Path
    #: its format: jsonl, marc, marcxml or parquet
    format: str
    #: records read, tagged, empty, truncated, already done (resumed), repeated ids, and
    #: released / to review (a local run; zeros for a sharded one)
    counts: TagCounts = field(default_factory=TagCounts)
    #: malformed records skipped (a local run)
    skipped: int = 0
    #: the review file of ``release_above``
    review: Path | None = None
    #: where a local run writes until it completes (``OUT.partial``)
    partial: Path | None = None
    #: records ``partial`` holds (this run's and the resumed ones)
    kept: int = 0
    #: the sharded run's result (`tagalign.batch.BatchResult`), else None
    batch: BatchResult | None = None
    #: engine workers a sharded run planned (``batch.workers`` says how many ran)
    planned_workers: int = 0
    #: the summary line (``1000 records read: 997 tagged (…), 3 malformed skipped``)
    summary: str = ""


class TaggingStopped(TagalignError):
    """A `tag_file` run stopped before it completed: a malformed record under ``strict``, a
    failed tagging batch, or failed shards. ``result`` is what it did; the finished records
    are kept (``result.partial``, or the shards done) and ``resume`` continues."""

    def __init__(self, message: str, result: TaggedFile):
        super().__init__(message)
        self.result = result


class TaggingInterrupted(KeyboardInterrupt):
    """A `tag_file` run interrupted (Ctrl-C): still a `KeyboardInterrupt`, carrying
    ``result`` as `TaggingStopped` does."""

    def __init__(self, message: str, result: TaggedFile):
        super().__init__(message)
        self.result = result


def load_trained(path: Path | str, mmap: bool = False, runtime: Runtime | None = None
                 ) -> Project:
    """The project at ``path``, refused (`NotTrainedError`) before any record is read when
    it is not trained."""
    project = Project.load(path, mmap=mmap, runtime=runtime)
    project.trained_recipe()
    return project


def tag_file(project: Project | Path | str, input: Path | str, output: Path | str,
             request: SuggestRequest | None = None, options: TagFileOptions | None = None, *,
             runtime: Runtime | None = None,
             progress: TagFileProgress | None = None) -> TaggedFile:
    """Tag every record of ``input`` into ``output`` as ``request`` asks (default: the
    project's limit and threshold), read, written and run as ``options`` say.

    ``project``: a loaded project, or its folder, loaded here (with ``options.mmap`` and
    ``runtime``) once the options and the input are checked; a sharded run needs only the
    folder (the workers load it; ``runtime``, else the project's, says whether the ranker
    runs compiled). Raises `TaggingStopped` (or `TaggingInterrupted`) when the run stops
    before it completes, with what it finished; the package's errors for bad options
    (`InputError`), missing files (`MissingFileError`), an untrained project."""
    options = options or TagFileOptions()
    request = request or PROJECT_DEFAULTS
    progress = progress or TagFileProgress()
    input, output = Path(input), Path(output)
    if options.domains is not None and not options.domains.exists():
        raise MissingFileError(f"domain model not found: {options.domains}", options.domains)
    if options.sharded:
        return _tag_sharded(project, input, output, request, options, runtime, progress)
    if not input.exists():
        raise MissingFileError(f"records not found: {input}", input)
    fmt = options.output_format(output, input)
    if not isinstance(project, Project):
        project = load_trained(project, options.mmap, runtime)
    if options.domains is not None:
        from tagalign.project.domains import attach

        project = attach(project, options.domains)
        request = replace(request, domains=True)
    review = options.review
    if options.release_above is not None and review is None:
        review = review_path(output)
    return _tag_local(project, input, output, request, options, fmt, review, progress)


def _tag_local(project: Project, input: Path, output: Path, request: SuggestRequest,
               options: TagFileOptions, fmt: str, review: Path | None,
               progress: TagFileProgress) -> TaggedFile:
    source = input if options.merge else None
    stream = open_prediction_stream(output, fmt, options.resume, agency=options.agency,
                                    merge=source)
    side = open_prediction_stream(review, fmt, options.resume, agency=options.agency,
                                  merge=source) if review is not None else None
    try:
        stream.open()
        if side is not None:
            side.open()
    except (PartialExistsError, NoSpaceError):
        stream.close()
        raise
    counts = TagCounts()
    if stream.done:
        progress.resumed(len(stream.done), stream.partial)
    report = InputReport(strict=options.strict)

    def result() -> TaggedFile:
        return TaggedFile(output, fmt, counts, report.n_skipped, review, stream.partial,
                          stream.kept, summary=counts.line(report))

    try:
        # the jobs are forked first, before the caller's progress display starts a thread
        with TaggingJobs(Tagger(project), options.jobs) as tagger:
            progress.start(False)
            try:
                _tag_all(tagger, input, stream, report, counts, request, options, side,
                         progress)
            finally:
                progress.stop()
        stream.commit()
        if side is not None:
            side.commit()
    except BaseException as exc:
        stream.close()
        if side is not None:
            side.close()
        _stopped(exc, result())
        raise
    return result()


def _stopped(exc: BaseException, done: TaggedFile) -> None:
    """Raise what a local run that stopped on ``exc`` ends in (nothing for an exit)."""
    how = (f"{done.kept} finished records are kept in {done.partial}; run the same command "
           f"with --resume to continue")
    if isinstance(exc, KeyboardInterrupt):
        raise TaggingInterrupted(f"interrupted; {how}", done) from exc
    if is_no_space(exc):  # named by the stream whose write failed (the review file's too)
        full = NoSpaceError.of(exc, rerun=f"rerun the same command with --resume "
                               f"({done.kept} finished records are kept in {done.partial})")
        full.__cause__ = exc
        raise TaggingStopped(str(full), done) from full
    if isinstance(exc, BadInputError):
        raise TaggingStopped(f"{exc} (--strict stops here); {how} once the input is fixed",
                             done) from exc
    if isinstance(exc, Exception):
        raise TaggingStopped(f"{type(exc).__name__}: {exc}; {how}", done) from exc


def _tag_all(tagger: TaggingJobs, input: Path, stream: PredictionStream, report: InputReport,
             counts: TagCounts, request: SuggestRequest, options: TagFileOptions,
             review: PredictionStream | None, progress: TagFileProgress) -> None:
    # --merge: read by the same decoder that the output stream re-reads the input with
    records = (rec for _, rec in iter_marc_records(input, report)) if options.merge \
        else read_records(input, report=report)
    tag_records(records, lambda chunk: tagger.submit(chunk, request), stream, counts,
                options.batch_size, on_batch=progress.batch, on_warning=progress.warning,
                review=review, release_above=options.release_above,
                # with jobs, the next batch is tagged while one is written
                overlap=tagger.forked)


def _tag_sharded(project: Project | Path | str, input: Path, output: Path,
                 request: SuggestRequest, options: TagFileOptions, runtime: Runtime | None,
                 progress: TagFileProgress) -> TaggedFile:
    """A folder of shards. ``mmap`` and ``compile_ranker`` are not output settings: a
    resumed run may change them. The domain model is loaded here first, so a wrong one
    stops the run before any worker starts."""
    if isinstance(project, Project):
        folder, runtime = project.path, runtime or project.runtime
    else:
        folder = Path(project)
        Project.check_trained_folder(folder)
    runtime = runtime or Runtime()
    fmt = options.format or "jsonl"
    spec: dict[str, Any] = {
        "task": "suggest", "project": str(folder.resolve()), "limit": request.limit,
        "threshold": request.threshold, "format": fmt, "batch_size": options.batch_size,
        "mmap": options.mmap, "compile_ranker": runtime.compile_ranker}
    if request.exclude:  # only then: a resumed run of an older spec still matches
        spec["exclude"] = sorted(request.exclude)
    if options.domains is not None:  # likewise
        from tagalign.project.domains import DomainModel
        from tagalign.vocab import Vocabulary

        DomainModel.load(options.domains, Vocabulary.load(folder))
        spec["domains"] = str(options.domains.resolve())
    engine = get_engine(options.engine, address=options.address,
                        num_workers=options.num_workers)
    progress.start(True)
    try:
        res = run_batch(spec, input.resolve(), output.resolve(), engine,
                        shard_size=options.shard_size, max_errors=options.max_errors,
                        on_plan=progress.planned, on_shard=progress.shard)
    finally:
        progress.stop()
    done = TaggedFile(output.resolve(), fmt, batch=res,
                      planned_workers=engine.planned_workers())
    try:
        res.check(options.max_errors)
    except TagalignError as exc:
        raise TaggingStopped(str(exc), done) from exc
    return done

