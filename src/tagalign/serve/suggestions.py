"""Suggestions on tagalign's own API: one record, or a batch, with reasons, warnings,
quality estimates and domains (`Service.suggest`).

``POST /tagalign/v1/projects/{id}/suggest``, ``POST /tagalign/v1/projects/{id}/suggest-batch``
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel

from tagalign.project import Project
from tagalign.records import Record
from tagalign.serve import API
from tagalign.serve import schemas as s
from tagalign.serve.depends import ProjectDep, ServiceDep
from tagalign.suggest import Quality, Suggestion, SuggestRequest

router = APIRouter(prefix=API)


@router.post("/projects/{project_id}/suggest", response_model=s.SuggestResponse)
def suggest(body: s.SuggestBody, project: ProjectDep, svc: ServiceDep) -> Response:
    rec = Record(id="request", title=body.title, abstract=body.abstract,
                 language=body.language)
    proj, tagged = svc.suggest(project.served, [rec], _request(body))
    return json_answer(s.SuggestResponse(results=_out(tagged[0].suggestions, svc.titles),
                                         warning=tagged[0].warning,
                                         quality=_quality(tagged[0].quality),
                                         domains=_domains(tagged[0].domains)), proj)


@router.post("/projects/{project_id}/suggest-batch", response_model=s.BatchResponse)
def suggest_batch(body: s.BatchRequest, project: ProjectDep, svc: ServiceDep) -> Response:
    recs = [Record(id=r.id or str(i), title=r.title, abstract=r.abstract,
                   language=r.language) for i, r in enumerate(body.records)]
    proj, tagged = svc.suggest(project.served, recs, _request(body))
    return json_answer(s.BatchResponse(results=[_out(t.suggestions, svc.titles) for t in tagged],
                                       warnings=[t.warning for t in tagged],
                                       qualities=[_quality(t.quality) for t in tagged],
                                       domains=[_domains(t.domains) for t in tagged]
                                       if proj.domain_model is not None else None), proj)


def json_answer(body: BaseModel, project: Project | None = None) -> Response:
    """The response model as JSON, built here in the endpoint's worker thread: returned
    as a model, FastAPI validates it again in a second trip through its thread pool (for a
    plain ``def`` endpoint), which costs a single-record suggest more than the validation.
    The same bytes as FastAPI's own serialisation (`response_model` still documents it)."""
    # X-Model-Version: the model that answered (a reload may swap it for the next request)
    served = project.model_version if project is not None else None
    version = served.get("version") if served else None
    return Response(body.model_dump_json(by_alias=True), media_type="application/json",
                    headers={"X-Model-Version": version} if version else None)


def _request(body: s.SuggestBody | s.BatchRequest) -> SuggestRequest:
    """A body's options; domains whenever the project has a domain model."""
    return SuggestRequest(limit=body.limit, threshold=body.threshold,
                          exclude=frozenset(body.exclude), domains=True)


def _with_titles(reasons: dict[str, Any], titles: Mapping[str, str]) -> dict[str, Any]:
    """Neighbours as ``{"id", "title"?, …}`` dicts, titles filled from ``titles``.

    Recipes may name neighbour records by id only (a string) or as dicts; clients get one
    shape, and a title whenever the recipe, the records file or a learned record has one.
    """
    nbrs = reasons.get("neighbours")
    if not isinstance(nbrs, list):
        return reasons
    out = []
    for n in nbrs:
        n = {"id": n} if isinstance(n, str) else dict(n) if isinstance(n, dict) else n
        if isinstance(n, dict) and not n.get("title") and n.get("id") in titles:
            n["title"] = titles[n["id"]]
        out.append(n)
    return {**reasons, "neighbours": out}


def _out(rows: list[Suggestion], titles: Mapping[str, str]) -> list[s.SuggestionOut]:
    return [s.SuggestionOut(id=x.id, label=x.label, score=round(float(x.score), 6),
                            reasons=_with_titles(x.reasons, titles)) for x in rows]


def _quality(q: Quality | None) -> s.QualityOut | None:
    return None if q is None else s.QualityOut(**q.to_json())


def _domains(found: list[tuple[str, float]] | None) -> list[s.DomainOut] | None:
    return None if found is None else [s.DomainOut(label=lab, score=round(float(sc), 4))
                                       for lab, sc in found]


__all__ = ["json_answer", "router"]
