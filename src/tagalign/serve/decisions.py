"""The librarians' decisions of a project, for a catalogue system to pull over HTTP.

``GET /tagalign/v1/projects/{id}/decisions?since=2026-11-27&format=marcxml``

The records librarians reviewed (of each, its latest decision), as `tagalign.feedback.export`
writes them: MARC-XML (the default), binary MARC 21, or training JSONL. Streamed: each
record is read from the feedback store, written and sent before the next, so the answer
starts at once and a year of decisions costs no more memory than a day's. With a tokens
file the route needs a token (`tagalign.serve.auth`), like learn: the decisions are the
library's work, not a public read. The decisions are read as the project's vocabulary
stands now (`tagalign.feedback.follow`): no retired heading's id is written.
"""

from __future__ import annotations

import re
from typing import Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from tagalign.feedback import export
from tagalign.serve import API
from tagalign.serve import schemas as s
from tagalign.serve.depends import ProjectDep, ServiceDep

Format = Literal["marcxml", "marc", "jsonl"]
_SAFE = re.compile(r"[^A-Za-z0-9._-]")  # a file name in a quoted header


router = APIRouter(prefix=API)
_CONTENT = {export.MEDIA_TYPES[f]: {"schema": {"type": "string", "format": "binary"}}
            for f in export.FORMATS}


@router.get("/projects/{project_id}/decisions", response_class=StreamingResponse,
            responses={200: {"description": "The reviewed records", "content": _CONTENT},
                       400: {"model": s.ErrorOut, "description": "since is not an ISO "
                                                                 "date or date and time"},
                       404: {"model": s.ErrorOut, "description": "Unknown project"}})
def decisions(project: ProjectDep, svc: ServiceDep,
              since: str | None = Query(None, max_length=40,
                                        description="Only records decided at or after "
                                                    "this ISO date or date and time "
                                                    "(UTC unless it names its offset)."),
              format: Format = Query("marcxml", description="marcxml, marc (binary "
                                     "MARC 21) or jsonl (training records)."),
              agency: str | None = Query(None, min_length=1, max_length=40,
                                         description="MARC: the agency in 883 $q "
                                                     "(default: the record's 003, else "
                                                     "tagalign)."),
              ) -> StreamingResponse:
    """Each record librarians reviewed, as its latest decision left it: its control
    number (001/003) and the subjects accepted, each a 650 linked to an 883 saying how
    it got there (an accepted suggestion: 883 1_, intellectually confirmed; a subject
    added by search: 883 2_, intellectual); rejected suggestions are not written."""
    served = project.served
    start = export.parse_since(since) if since is not None else None
    vocab = served.project.vocab
    labels = export.vocabulary_labels(vocab)
    # a generator: the store is read in the thread that streams the answer; subjects
    # redirected since they were decided are their targets, deleted or split ones left out
    chunks = export.export_chunks(svc.store.reviewed(served.id, start), format, labels,
                                  agency, successor=vocab.successor)
    name = f"{_SAFE.sub('_', served.id)}-decisions.{export.SUFFIXES[format]}"
    return StreamingResponse(chunks, media_type=export.MEDIA_TYPES[format],
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


__all__ = ["router"]
