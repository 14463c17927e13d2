"""The records file's records on tagalign's own API (``tagalign serve --records``: the web
page shows a record's neighbours by these).

``GET /tagalign/v1/records/{id}``
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from tagalign.serve import API
from tagalign.serve import schemas as s
from tagalign.serve.depends import ServiceDep

router = APIRouter(prefix=API)


@router.get("/records/{record_id}", response_model=s.RecordOut)
def get_record(record_id: str, svc: ServiceDep) -> s.RecordOut:
    rec = svc.records.get(record_id)
    if rec is None:
        raise HTTPException(404, f"record {record_id!r} not found"
                            + ("" if svc.records else " (no records file loaded)"))
    return s.RecordOut(id=rec.id, title=rec.title, abstract=rec.abstract,
                       language=rec.language, subjects=rec.subjects)


__all__ = ["router"]
