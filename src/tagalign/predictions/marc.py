"""Suggestions written as MARC 21, the way DNB writes its machine-made subjects.

Each suggestion is a ``650 _7 $8 N\\p $0 (DE-588)ID $0 https://d-nb.info/gnd/ID $a LABEL
$2 gnd`` linked to an ``883 0_ $8 N\\p $a maschinell gebildet $c SCORE $d YYYYMMDD $q
ORG``, so a reader (tagalign's own included) can tell them from subjects a person gave;
each domain (``suggest --domains``) an ``084 __ $8 N\\p $a CODE $2 linsearch`` linked the
same way.

Without ``merge`` a record holds its control number (001, and 003 when the id carries one:
``(DE-101)123``) and these fields; with ``merge`` it is the input record, whole, with these
fields added in tag order and link numbers after those it uses.

Why the input is read a second time for ``merge`` rather than carried along: the tag loop
streams `Record`s, and holding each record's MARC form beside it would cost memory for
every record a run skips (already done when resumed, repeated ids) and tie `Record` to
MARC. The stream reads the input again, in step: tagged records are written in input
order, so finding the next one is a forward scan, and memory stays that of one record.
"""

from __future__ import annotations

import gzip
import io
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

from pymarc import Record as MarcRecord

from tagalign.errors import InputError
from tagalign.io import InputReport
from tagalign.predictions.stream import PredictionStream
from tagalign.records.marc.binary import MarcItem
from tagalign.records.marc.reader import iter_marc_records
from tagalign.records.marc.writer import (
    FORMATS,
    XML_HEAD,
    XML_TAIL,
    control_fields,
    domain_field,
    machine_note,
    marc_bytes,
    next_link,
    subject_field,
)
from tagalign.records.record import Record
from tagalign.suggest import Quality, Suggestion

DEFAULT_AGENCY = "tagalign"
#: leader of a record that holds only suggestions: status c (corrected), language
#: material, UTF-8; its length and base address are filled in when it is written
SUGGESTIONS_LEADER = "00000cam a2200000 u 4500"


def today() -> str:
    """The date written in ``883 $d`` (UTC, ``YYYYMMDD``)."""
    return time.strftime("%Y%m%d", time.gmtime())


def output_format(path: Path | str, given: str | None = None) -> str:
    """``jsonl``, ``marc`` or ``marcxml``: ``given``, else by the file name (``.mrc``,
    ``.marc``; ``.xml``; ``.gz`` after any)."""
    if given is not None:
        return given
    name = Path(path).name.lower().removesuffix(".gz").removesuffix(".partial")
    if name.endswith((".mrc", ".marc", ".iso2709")):
        return "marc"
    if name.endswith((".xml", ".marcxml")):
        return "marcxml"
    return "jsonl"


class MarcPredictionStream(PredictionStream):
    """A `PredictionStream` of MARC records (``fmt``: ``marc`` or ``marcxml``; gzip when
    OUT ends in ``.gz``). ``agency``: ``883 $q`` (default: the record's 003, else
    `DEFAULT_AGENCY`); ``date``: ``883 $d`` (default: `today`); ``merge``: the input MARC
    file whose records come back whole (see the module docstring). Resuming keeps every
    whole record of ``OUT.partial`` (a record cut off by a killed run is dropped and made
    again); a MARC-XML partial file is a collection not yet closed."""

    def __init__(self, path: Path | str, fmt: str, resume: bool = False, *,
                 agency: str | None = None, date: str | None = None,
                 merge: Path | str | None = None):
        super().__init__(path, resume)
        if fmt not in FORMATS:
            raise ValueError(f"unknown MARC format {fmt!r}; use one of {FORMATS}")
        self.fmt, self.agency, self.date = fmt, agency, date or today()
        self.merge = Path(merge) if merge is not None else None
        self._source: Iterator[tuple[MarcItem[MarcRecord], Record]] | None = None

    def _open_text(self, path: Path) -> IO[bytes]:
        raw = open(path, "wb")  # noqa: SIM115 - closed in close()
        fh: IO[bytes] | gzip.GzipFile = raw
        if self.path.suffix == ".gz":
            self._raw = raw
            fh = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
        if self.fmt == "marcxml":
            fh.write(XML_HEAD)
        return fh  # type: ignore[return-value]  # typeshed: a GzipFile is no IO[bytes]

    def _copy_complete_lines(self, previous: Path) -> None:
        quiet = InputReport(stream=io.StringIO(), max_shown=0)
        for item, rec in iter_marc_records(previous, quiet):
            if rec.id not in self.done:
                self.done.add(rec.id)
                self._put(marc_bytes(item.record, self.fmt))
        self.flush()

    def write(self, rid: str, suggestions: Iterable[Suggestion],
              quality: Quality | None = None,
              domains: Sequence[tuple[str, float]] | None = None) -> None:
        """One record with its suggestions and, given, its domains (``084 $2 linsearch``,
        each linked to an 883 with its score as a subject's is); the quality estimate has
        no MARC field."""
        if self.merge is not None:
            rec = self._input_record(rid, self.merge)
        else:
            rec = MarcRecord(leader=SUGGESTIONS_LEADER, force_utf8=True)
            rec.add_field(*control_fields(rid))
        agency = self.agency or _agency(rec) or DEFAULT_AGENCY
        link = next_link(rec)
        notes = []
        for s in suggestions:
            rec.add_ordered_field(subject_field(s.id, s.label or None, link))
            notes.append(machine_note(link, s.score, self.date, agency))
            link += 1
        for code, score in domains or ():
            rec.add_ordered_field(domain_field(code, link))
            notes.append(machine_note(link, score, self.date, agency))
            link += 1
        if notes:
            rec.add_ordered_field(*notes)
        self._put(marc_bytes(rec, self.fmt))
        self.done.add(rid)
        self.written += 1

    def write_line(self, rid: str, line: str) -> None:
        raise TypeError("a MARC prediction stream writes records (write), not JSON lines")

    def _input_record(self, rid: str, merge: Path) -> MarcRecord:
        if self._source is None:  # bad input was reported by the first read: quiet here
            self._source = iter_marc_records(merge, InputReport(stream=io.StringIO(),
                                                                     max_shown=0))
        for item, rec in self._source:
            if rec.id == rid:
                return item.record
        raise InputError(f"--merge: record {rid} is not in {self.merge} after the records "
                         "written before it (the input changed during the run?)")

    def commit(self) -> Path:
        if self.fmt == "marcxml" and self._fh is not None:
            self._put(XML_TAIL)
        return super().commit()


def _agency(rec: MarcRecord) -> str | None:
    field = rec.get("003")
    return field.data.strip() or None if field is not None and field.data else None


def open_prediction_stream(path: Path | str, fmt: str, resume: bool = False, *,
                           agency: str | None = None, date: str | None = None,
                           merge: Path | str | None = None) -> PredictionStream:
    """The stream for ``fmt`` (see `output_format`): JSONL, or MARC."""
    if fmt == "jsonl":
        if merge is not None or agency is not None:
            raise InputError("--merge and --agency go with MARC output (--format marc or "
                             "marcxml)")
        return PredictionStream(path, resume)
    return MarcPredictionStream(path, fmt, resume, agency=agency, date=date, merge=merge)
