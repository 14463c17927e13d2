"""Librarians' decisions back to the catalogue: MARC 21 (binary or MARC-XML) or JSONL.

Each record a librarian reviewed (`FeedbackStore.reviewed`: the latest request on it) is
written with its control number (001, and 003 when the record id carries one:
``(DE-101)123``) and, for each subject that request accepted,

    650 _7 $8 N\\p $0 (DE-588)ID $0 https://d-nb.info/gnd/ID $a LABEL $2 gnd

linked by ``$8`` to an 883 that says how the subject got there
(`tagalign.records.marc.provenance`): a machine suggestion the librarian accepted is
``CONFIRMED`` (``883 1_``), a subject the librarian found by search is ``INTELLECTUAL``
(``883 2_``); ``$d`` is the day of the decision, ``$q`` the agency (given, else the
record's 003, else ``tagalign``). Rejected suggestions are not written. ``LABEL`` is the
subject's label in the record's language from the project's vocabulary, as a suggestion's
is. A record whose latest request accepted nothing is written with its control number
alone: reviewed, nothing to add.

With the catalogue's own records (``--merge``, `merged_chunks`), each reviewed record that
file holds comes back whole, in the file's order: its fields untouched, the accepted
subjects it does not hold yet (in any 650 or 689) added in tag order, their links after
those it uses. A subject it holds as a machine's keeps that 883: the record's own fields
are the catalogue's to change.

JSONL is the training data `tagalign train --feedback` reads: the records with at least
one accepted subject, as `Record.to_json`.

Given the project's vocabulary (``successor``: `tagalign.vocab.Vocabulary.successor`), the
decisions are read as it stands now (`tagalign.feedback.follow`): a subject redirected
since it was decided is written as its target (once, when both were accepted), a deleted or
split one is left out and counted; no retired id is written.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pymarc import Record as MarcRecord

from tagalign.errors import UsageError
from tagalign.feedback.follow import Followed, Successor, follow_reviewed
from tagalign.feedback.schema import ADDED, Reviewed
from tagalign.io import InputReport, atomic_path
from tagalign.predictions.marc import DEFAULT_AGENCY, SUGGESTIONS_LEADER
from tagalign.records.marc.fields import gnd_id
from tagalign.records.marc.provenance import Provenance, provenance_field
from tagalign.records.marc.reader import iter_marc_records
from tagalign.records.marc.writer import MarcWriter, control_fields, next_link, subject_field
from tagalign.vocab import Vocabulary

FORMATS = ("jsonl", "marc", "marcxml")
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "marc": "application/marc",
               "marcxml": "application/marcxml+xml"}
SUFFIXES = {"jsonl": "jsonl", "marc": "mrc", "marcxml": "xml"}
#: a subject's label in a language (None: write no ``$a``)
Labels = Callable[[str, str | None], str | None]


def vocabulary_labels(vocab: Vocabulary) -> Labels:
    """Labels from a vocabulary: the record's language, else German (`Subject.label`)."""
    def label(sid: str, language: str | None) -> str | None:
        subject = vocab.get(sid)
        return None if subject is None else subject.label(language)

    return label


def no_labels(sid: str, language: str | None) -> str | None:
    """No labels (JSONL has none)."""
    return None


def parse_since(text: str) -> _dt.datetime:
    """``--since`` and ``?since=``: an ISO date (midnight UTC) or date and time (UTC unless
    it names its offset), as a UTC time."""
    try:
        when = _dt.datetime.fromisoformat(text.strip())
        return (when.replace(tzinfo=_dt.UTC) if when.tzinfo is None else when
                ).astimezone(_dt.UTC)
    except (ValueError, OverflowError):  # overflow: an offset past year 1 or 9999
        raise UsageError(f"since {text!r}: give an ISO date (2026-11-27) or date and time "
                         "(2026-11-27T18:00:00+01:00)") from None


def provenance(origin: str) -> Provenance:
    """What an accepted subject's origin makes it in the catalogue."""
    return Provenance.INTELLECTUAL if origin == ADDED else Provenance.CONFIRMED


def _subjects_in(rec: MarcRecord) -> set[str]:
    """GND ids of a record's 650 and 689 fields (as `tagalign.records.marc.fields` reads
    them), whoever gave them."""
    out: set[str] = set()
    for field in rec.get_fields("650", "689"):
        bare = field.tag == "650" and any(v.strip().lower() == "gnd"
                                          for v in field.get_subfields("2"))
        out.update(i for v in field.get_subfields("0") if (i := gnd_id(v, bare)) is not None)
    return out


def _agency(rec: MarcRecord) -> str | None:
    field = rec.get("003")
    return (field.data or "").strip() or None if field is not None else None


def add_decisions(rec: MarcRecord, reviewed: Reviewed, labels: Labels,
                  agency: str | None = None) -> int:
    """Add to ``rec`` a 650 and its 883 for each subject ``reviewed`` accepted that the
    record does not hold yet (see the module); returns how many were added."""
    present = _subjects_in(rec)
    link = next_link(rec)
    date = reviewed.decided.astimezone(_dt.UTC).strftime("%Y%m%d")
    who = agency or _agency(rec) or DEFAULT_AGENCY
    notes = []
    for sid, origin in reviewed.origins.items():
        if sid in present:
            continue
        rec.add_ordered_field(subject_field(sid, labels(sid, reviewed.record.language), link))
        notes.append(provenance_field(provenance(origin), link, date=date, agency=who))
        link += 1
    if notes:
        rec.add_ordered_field(*notes)
    return len(notes)


def decision_record(reviewed: Reviewed, labels: Labels, agency: str | None = None
                    ) -> MarcRecord:
    """A record of the control number and the decided subjects alone."""
    rec = MarcRecord(leader=SUGGESTIONS_LEADER, force_utf8=True)
    rec.add_field(*control_fields(reviewed.record.id))
    add_decisions(rec, reviewed, labels, agency)
    return rec


@dataclass
class Exported(Followed):
    """What an export wrote: records, and (``--merge``) the reviewed records the
    catalogue's file did not hold, which are not written; with a ``successor``, the
    accepted subjects written as their targets and those left out (`Followed`)."""

    written: int = 0
    not_in_merge: int = 0


def following(items: Iterable[Reviewed], successor: Successor | None, done: Followed
              ) -> Iterator[Reviewed]:
    """``items`` read through ``successor`` (`follow_reviewed`, counted in ``done``) as
    they stream by; as they are without one."""
    if successor is None:
        yield from items
        return
    for item in items:
        yield follow_reviewed(item, successor, done)


def _marc_chunks(records: Iterable[MarcRecord], fmt: str, done: Exported) -> Iterator[bytes]:
    """Each record's bytes as `MarcWriter` writes them, the collection's head and tail too."""
    buf = io.BytesIO()
    writer = MarcWriter(buf, fmt)
    for rec in records:
        writer.write(rec)
        done.written += 1
        yield _take(buf)
    writer.close()
    yield _take(buf)


def _take(buf: io.BytesIO) -> bytes:
    data = buf.getvalue()
    buf.seek(0)
    buf.truncate()
    return data


def export_chunks(items: Iterable[Reviewed], fmt: str, labels: Labels,
                  agency: str | None = None, done: Exported | None = None,
                  successor: Successor | None = None) -> Iterator[bytes]:
    """The reviewed records in ``fmt`` (`FORMATS`), a record at a time, their subjects
    read through ``successor`` (see the module); ``done`` counts them."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    done = done if done is not None else Exported()
    items = following(items, successor, done)
    if fmt == "jsonl":
        for r in items:
            if r.record.subjects:
                done.written += 1
                yield (json.dumps(r.record.to_json(), ensure_ascii=False) + "\n").encode()
        return
    yield from _marc_chunks((decision_record(r, labels, agency) for r in items), fmt, done)


def merged_chunks(source: Path, items: Iterable[Reviewed], fmt: str, labels: Labels,
                  agency: str | None = None, done: Exported | None = None,
                  report: InputReport | None = None, successor: Successor | None = None
                  ) -> Iterator[bytes]:
    """The records of the MARC file ``source`` that ``items`` decide, in file order, each
    whole with its decided subjects (read through ``successor``) added; ``done`` counts
    them and the decided records ``source`` does not hold; ``report``: the file's bad
    records (default: logged). The decisions are held by record id while the file
    streams by."""
    if fmt not in ("marc", "marcxml"):
        raise UsageError("--merge goes with MARC output (--format marc or marcxml)")
    done = done if done is not None else Exported()
    decided = {r.record.id: r for r in following(items, successor, done)}
    report = report if report is not None else InputReport()
    found: set[str] = set()

    def merged() -> Iterator[MarcRecord]:
        for item, rec in iter_marc_records(source, report):
            if rec.id in decided and rec.id not in found:
                found.add(rec.id)
                add_decisions(item.record, decided[rec.id], labels, agency)
                yield item.record

    yield from _marc_chunks(merged(), fmt, done)
    done.not_in_merge = len(decided) - len(found)


def export_file(out: Path, items: Iterable[Reviewed], fmt: str, labels: Labels, *,
                agency: str | None = None, merge: Path | None = None,
                successor: Successor | None = None) -> Exported:
    """Write the reviewed records to ``out`` in ``fmt`` (gzip when it ends in ``.gz``),
    atomically, their subjects read through ``successor``; with ``merge``, the records of
    that MARC file they decide (see the module)."""
    done = Exported()
    chunks = (export_chunks(items, fmt, labels, agency, done, successor) if merge is None
              else merged_chunks(merge, items, fmt, labels, agency, done,
                                 successor=successor))
    with atomic_path(out) as tmp, open(tmp, "wb") as raw:
        # typeshed: a GzipFile is a BufferedIOBase, which it does not declare an IO[bytes]
        fh: IO[bytes] = (gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)  # type: ignore[assignment]
                         if out.suffix == ".gz" else raw)
        with fh:
            for chunk in chunks:
                fh.write(chunk)
    return done


__all__ = ["FORMATS", "MEDIA_TYPES", "SUFFIXES", "Exported", "Labels", "add_decisions",
           "decision_record", "export_chunks", "export_file", "following", "merged_chunks",
           "no_labels", "parse_since", "provenance", "vocabulary_labels"]
