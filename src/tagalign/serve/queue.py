"""A review queue: the records librarians finish one after another on the web page.

``tagalign serve PROJECT --queue records.jsonl.gz [--release-above X]`` serves the records
of a file in order: JSONL, or the catalogue's MARC 21 or MARC-XML (read as any records
file, `tagalign.records.read_records`; a record's id is its control number, ``(003)001``,
which the decisions keep through to the catalogue export, `tagalign.feedback.export`). With
a release cut-off and quality estimates, records whose estimated recall is at least X are
released as they are and left out; records without an estimate always stay. Which records
are finished is kept in the feedback store (`FeedbackStore.finish`), per project, queue
(`RecordQueue.name`, the queue file's name) and record id, so reloading the page — or
restarting the server — resumes at the first record not finished yet, and records appended
to the file (or a reordered file) keep the progress of those already finished. Decisions
themselves go through ``/learn`` as on the page's free-form view; those stored before the
project's vocabulary was updated are shown as it stands now (a redirected heading's as its
target's, a deleted or split heading's not at all).

``GET  /tagalign/v1/projects/{id}/queue``                    where the queue stands
``GET  /tagalign/v1/projects/{id}/queue/{position}``         one record and its decisions
``POST /tagalign/v1/projects/{id}/queue/{position}/finish``  mark it finished
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request

from tagalign.feedback import ADDED, FeedbackStore, ServedStores
from tagalign.feedback.follow import follow_decisions, follow_reviewed
from tagalign.project import Project, Tagger
from tagalign.records import Record
from tagalign.serve import API
from tagalign.serve import schemas as s
from tagalign.serve.depends import Lookup, ProjectDep, ServiceDep
from tagalign.serve.service import Served
from tagalign.suggest import SuggestRequest

# estimated recall of each record's suggestions (None: no estimate for that record)
Estimate = Callable[[Project, Sequence[Record]], Sequence[float | None]]
PAGE_LIMIT = 10  # the page asks for 10 subjects; an estimate is one of the list it shows
BATCH = 256


def estimated_recall(project: Project, records: Sequence[Record]) -> list[float | None]:
    """The recall the project estimates for each record's list of `PAGE_LIMIT` subjects
    (`Tagger.tag`, issue 20 A). None for every record when the project cannot estimate:
    its recipe has no estimator."""
    tagger, request = Tagger(project), SuggestRequest(limit=PAGE_LIMIT)
    out: list[float | None] = []
    for i in range(0, len(records), BATCH):
        for tagged in tagger.tag(list(records[i:i + BATCH]), request):
            out.append(None if tagged.quality is None else float(tagged.quality.recall))
    return out


@dataclass(frozen=True)
class Selection:
    """The records one project's queue holds, and how they were chosen."""

    records: list[Record]
    estimated: bool
    skipped: int


class RecordQueue:
    """Records to review in file order; ``estimate`` and ``release_above`` leave out those
    a project can release without review (chosen once per project, on first use)."""

    def __init__(self, records: Sequence[Record], release_above: float | None = None,
                 estimate: Estimate | None = estimated_recall, name: str = "queue"):
        self.records = list(records)
        dupes = sorted(rid for rid, n in Counter(r.id for r in self.records).items() if n > 1)
        if dupes:
            raise ValueError(f"queue records need distinct ids (progress is kept by id); "
                             f"repeated: {', '.join(dupes[:5])}")
        if release_above is not None and not 0.0 <= release_above <= 1.0:
            raise ValueError(f"release cut-off {release_above} is not within 0…1")
        self.release_above = release_above
        self.estimate = estimate
        # progress is kept by record id under this name, not by the file's contents:
        # appending records must not restart the queue (the store's column: 64 characters)
        self.name = name if len(name) <= 64 else (
            name[:47] + "-" + hashlib.sha256(name.encode()).hexdigest()[:16])
        self._selected: dict[str, Selection] = {}
        self._lock = threading.Lock()

    def select(self, project_id: str, project: Project) -> Selection:
        """The records ``project_id``'s queue holds (estimated on first call, then kept)."""
        with self._lock:
            if project_id not in self._selected:
                self._selected[project_id] = self._choose(project)
            return self._selected[project_id]

    def _choose(self, project: Project) -> Selection:
        if self.release_above is None or self.estimate is None or not self.records:
            return Selection(self.records, estimated=False, skipped=0)
        recalls = list(self.estimate(project, self.records))
        if all(r is None for r in recalls):
            return Selection(self.records, estimated=False, skipped=0)
        keep = [rec for rec, recall in zip(self.records, recalls, strict=True)
                if recall is None or recall < self.release_above]
        return Selection(keep, estimated=True, skipped=len(self.records) - len(keep))


async def review_queue(request: Request) -> RecordQueue | None:
    """The app's review queue (None: the server runs without ``--queue``)."""
    return request.app.state.review


async def _position(position: int) -> int:
    return position


QueueDep = Annotated[RecordQueue | None, Depends(review_queue)]
#: the path's ``{position}``, read after the project's ``{project_id}`` (the order the
#: document lists them in: a handler's own parameters would come first)
PositionDep = Annotated[int, Depends(_position)]

router = APIRouter(prefix=API + "/projects/{project_id}/queue", responses={
    404: {"model": s.ErrorOut, "description": "Unknown project or position, or the "
                                              "server runs without --queue"}})


@router.get("", response_model=s.QueueOut)
def get_queue(project: ProjectDep, review: QueueDep, svc: ServiceDep) -> s.QueueOut:
    """Size, progress and the first record not finished yet (where the page resumes)."""
    return _status(svc.store, *_selected(project, review))


@router.get("/{position}", response_model=s.QueueItemOut)
def get_item(project: ProjectDep, position: PositionDep, review: QueueDep, svc: ServiceDep
             ) -> s.QueueItemOut:
    """The record at ``position`` with the decisions stored for it so far."""
    served, rq, sel = _selected(project, review)
    rec, store = _record_at(sel, position), svc.store
    vocab = served.project.vocab
    # decided before a vocabulary update: a redirected heading's decision is its target's,
    # a deleted or split heading's is gone (`tagalign.feedback.follow`)
    decided = follow_decisions(store.latest_decisions(served.id, rec.id), vocab.successor)
    added = [sid for r in store.reviewed(served.id, record_id=rec.id)
             for sid, origin in follow_reviewed(r, vocab.successor).origins.items()
             if origin == ADDED]
    return s.QueueItemOut(
        position=position, size=len(sel.records),
        finished=rec.id in store.finished(served.id, rq.name),
        record=s.RecordOut(id=rec.id, title=rec.title, abstract=rec.abstract,
                           language=rec.language, subjects=rec.subjects),
        decisions={sid: "accept" if d == "accept" else "reject" for sid, d in decided.items()},
        labels={sid: vocab.label(sid, rec.language) for sid in decided},
        added=added)


@router.post("/{position}/finish", response_model=s.QueueOut)
def finish(project: ProjectDep, position: PositionDep, review: QueueDep, svc: ServiceDep
           ) -> s.QueueOut:
    """Mark the record at ``position`` finished; the answer names the next one."""
    served, rq, sel = _selected(project, review)
    svc.store.finish(served.id, rq.name, _record_at(sel, position).id)
    return _status(svc.store, served, rq, sel)


def _selected(project: Lookup, review: RecordQueue | None
              ) -> tuple[Served, RecordQueue, Selection]:
    """The project, the queue and the records it holds for the project (404: an unknown
    project, then no queue)."""
    served = project.served
    if review is None:
        raise HTTPException(404, "no review queue: start the server with "
                                 "`tagalign serve PROJECT --queue RECORDS`")
    return served, review, review.select(served.id, served.project)


def _status(store: FeedbackStore | ServedStores, served: Served, rq: RecordQueue,
            sel: Selection) -> s.QueueOut:
    done = store.finished(served.id, rq.name)
    position = next((i for i, r in enumerate(sel.records) if r.id not in done), None)
    return s.QueueOut(name=rq.name, size=len(sel.records),
                      finished=sum(r.id in done for r in sel.records), position=position,
                      release_above=rq.release_above, estimated=sel.estimated,
                      skipped=sel.skipped)


def _record_at(sel: Selection, position: int) -> Record:
    if not 0 <= position < len(sel.records):
        raise HTTPException(404, f"no record at position {position}; the queue holds "
                                 f"{len(sel.records)}")
    return sel.records[position]


__all__ = ["Estimate", "QueueDep", "RecordQueue", "Selection", "estimated_recall", "router"]
