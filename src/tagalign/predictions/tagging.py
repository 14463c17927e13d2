"""Tag a record file into a `PredictionStream`: the loop behind `tagalign suggest`.

Records are read as a stream and tagged in batches; every finished batch is flushed to
``OUT.partial`` before the next starts, so a failure keeps it. With a resumed stream the
records already in it are counted and skipped; a repeated id is tagged once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tagalign.io import BadInputError, InputReport
from tagalign.predictions.stream import PredictionStream
from tagalign.records import EMPTY_WARNING, Checked, Record, check_record
from tagalign.suggest import Tagged

#: checked records → a call that waits for their `Tagged`, one each
#: (`tagalign.project.jobs.TaggingJobs.submit`)
SubmitBatch = Callable[[Sequence[Checked]], Callable[[], list[Tagged]]]


def review_path(path: Path | str) -> Path:
    """Default review file of ``OUT``: ``.review`` before the suffix (pred.review.jsonl,
    pred.review.jsonl.gz)."""
    path = Path(path)
    suffixes = "".join(path.suffixes[-2:] if path.suffix == ".gz" else path.suffixes[-1:])
    stem = path.name[:len(path.name) - len(suffixes)] if suffixes else path.name
    return path.with_name(f"{stem}.review{suffixes}")


@dataclass
class TagCounts:
    """What the summary line reports; `read` counts every well-formed record of the input
    (a malformed line is not a record: it is counted by the report)."""

    read: int = 0
    tagged: int = 0
    empty: int = 0
    truncated: int = 0
    already: int = 0  # in OUT.partial from an earlier run (--resume)
    duplicates: int = 0
    released: int = 0  # with --release-above: written to OUT
    review: int = 0  # with --release-above: written to the review file

    def line(self, report: InputReport) -> str:
        """E.g. ``1000 records read: 997 tagged (2 empty: no suggestions), 3 skipped ...``."""
        tagged = f"{self.tagged} tagged ({self.empty} empty: no suggestions"
        tagged += f", {self.truncated} truncated)" if self.truncated else ")"
        if self.released or self.review:
            tagged += f" — {self.released} released, {self.review} to review"
        parts = [tagged, f"{report.n_skipped} malformed skipped"]
        if self.already:
            parts.append(f"{self.already} already done (--resume)")
        if self.duplicates:
            parts.append(f"{self.duplicates} repeated ids skipped")
        return f"{self.read} records read: " + ", ".join(parts)


def tag_records(records: Iterable[Record], submit: SubmitBatch, stream: PredictionStream,
                counts: TagCounts, batch_size: int,
                on_batch: Callable[[TagCounts], None] | None = None,
                on_warning: Callable[[str, str], None] | None = None,
                review: PredictionStream | None = None,
                release_above: float | None = None,
                overlap: bool = False) -> None:
    """Tag ``records`` into ``stream`` (opened) by ``submit``, batch by batch; ``on_batch``
    after each flushed batch, ``on_warning(record id, warning)`` for an empty or truncated
    record. Each record is checked as it is read (`check_record`: a huge text is cut then,
    not when its batch is tagged) and handed on checked, so it is checked once. A
    `BadInputError` from ``records`` (strict reading) still writes the batch read before
    it, then rises. ``review`` (opened) and ``release_above``: see the module docstring.

    ``overlap`` (forked jobs): a batch is started, and the one before it written when
    done, so the processes tagging never wait for the writing and reading between two
    batches. A failure loses only the batches not yet done; each done batch is flushed as
    before. Without it each batch is written before the next is started."""
    if (review is None) != (release_above is None):
        raise ValueError("give both review and release_above, or neither")

    def target(tagged: Tagged) -> PredictionStream:
        if review is None or release_above is None:  # given both or neither (above)
            return stream
        released = tagged.quality is not None and tagged.quality.recall >= release_above
        counts.released += released
        counts.review += not released
        return stream if released else review

    def write(chunk: list[Checked], answers: list[Tagged]) -> None:
        for (rec, _), tagged in zip(chunk, answers, strict=True):
            warning = tagged.warning
            target(tagged).write(rec.id, tagged.suggestions, tagged.quality, tagged.domains)
            counts.tagged += 1
            if warning:
                counts.empty += warning == EMPTY_WARNING
                counts.truncated += warning != EMPTY_WARNING
                if on_warning is not None:
                    on_warning(rec.id, warning)
        stream.flush()  # every finished batch is on disk before the next one starts
        if review is not None:
            review.flush()
        if on_batch is not None:
            on_batch(counts)

    flying: list[tuple[list[Checked], Callable[[], list[Tagged]]]] = []  # started, not written
    flying_ids: set[str] = set()

    def finish() -> None:
        """Write the batch started last (waiting until it is done)."""
        if flying:
            chunk, answers = flying.pop()
            write(chunk, answers())
            flying_ids.clear()

    def run(chunk: list[Checked]) -> None:
        if not overlap:
            write(chunk, submit(chunk)())
            return
        answers = submit(chunk)  # started before the batch before it is written
        finish()
        flying.append((chunk, answers))
        flying_ids.update(r.id for r, _ in chunk)

    chunk: list[Checked] = []
    pending: set[str] = set()  # ids in `chunk`
    done = [stream.done] if review is None else [stream.done, review.done]
    resumed = set().union(*done)  # ids finished by an earlier run
    try:
        for rec in records:
            counts.read += 1
            if rec.id in pending or rec.id in flying_ids \
                    or (any(rec.id in d for d in done) and rec.id not in resumed):
                counts.duplicates += 1
            elif rec.id in resumed:
                counts.already += 1
            else:
                pending.add(rec.id)
                # cut huge texts now, not when the batch is tagged: a batch of 20 MB
                # abstracts would otherwise sit in memory whole
                chunk.append(check_record(rec))
                if len(chunk) >= batch_size:
                    run(chunk)
                    chunk, pending = [], set()
    except BadInputError:  # --strict: the records before the bad one are still tagged
        if chunk:
            run(chunk)
        finish()
        raise
    if chunk:
        run(chunk)
    finish()
