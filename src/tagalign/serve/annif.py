"""Annif's REST API at ``/v1``, following Annif 1.4's OpenAPI document to the letter.

Existing Annif clients (the `annif-client` library, catalogue plugins) work by pointing
them at ``http://HOST:PORT/v1/``. Differences from tagalign's own API
(`tagalign.serve.app`, under ``/tagalign/v1``):

- one ``text`` per document: its first non-empty line is the record's title, the rest its
  abstract (`split_text`); the record language is identified as for any record without
  one (`tagalign.text.guess_language`); ``language`` only picks the language of the
  subject labels (default: the project's first vocabulary language), as in Annif;
- results are ``{uri, label, notation, score}`` with full GND URIs
  (``https://d-nb.info/gnd/<id>``), no reasons and no warnings;
- errors are RFC 7807 problems (``application/problem+json``) with Annif's status codes:
  400 for bad input (Annif's framework answers 400, not 422), 404 for unknown projects,
  413 as ``text/plain``;
- ``learn`` stores every document with at least one known subject in the feedback store
  (record id ``annif:`` + the first 16 hex digits of the text's SHA-256), teaches recipes
  that learn online, and answers 204; subjects outside the vocabulary are ignored, as
  Annif does, and so are those of headings deleted or split since (`tagalign vocab
  update`), while a redirected heading's is learned as its target's (Annif's 204 has no
  place to say so). Learning is off unless the project allows it (``allow_learn``, Annif's
  default off too): learn then answers Annif's 403 "Learning not allowed". A project
  served with ``--mmap`` is read-only: learn answers 403 (Annif's "Operation is not
  allowed"); both store nothing;
- a project not trained yet is listed (``is_trained: false``) and suggest answers 503,
  as Annif does;
- a project whose vocabulary was updated by change files (`tagalign vocab update`)
  describes it with one property more than Annif's: ``vocab.state``, the state the
  project records (its tagalign ``vocabulary_state``);
- a request without ``limit`` gets the project's (`Project.defaults`), else Annif's
  documented 10 (`service.ANNIF_DEFAULT_LIMIT`), not tagalign's `DEFAULT_LIMIT`; a
  ``limit`` and ``threshold`` are checked against the request's bounds with their one
  message (`tagalign.suggest.LIMIT`, ``THRESHOLD``), except that Annif's document sets the
  limit no maximum: one over `tagalign.suggest.MAX_LIMIT` is cut to it, not refused.

What a request does is the `tagalign.serve.service.Service`'s, as for tagalign's own API;
this module only translates Annif's shapes. Bodies are parsed and validated here rather
than by FastAPI, so that every failure gets Annif's status and shape; these routes stay
out of tagalign's OpenAPI document (Annif's own document describes them). Like Annif,
suggest also takes multipart forms, and the Annif routes allow cross-origin GET (and
simple) requests from any origin (CORS), so browser-based catalogue plugins work; JSON
POSTs across sites only from allow-listed origins (`tagalign.serve.guard`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from http import HTTPStatus
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr, TypeAdapter, ValidationError
from starlette.datastructures import UploadFile

from tagalign.errors import InputError
from tagalign.feedback import Decision
from tagalign.project import LearningNotAllowedError, Project, ReadOnlyError
from tagalign.records import Record
from tagalign.serve.depends import ProjectDep, ServiceDep
from tagalign.serve.service import (
    ANNIF_DEFAULT_LIMIT,
    GND_URI,
    Served,
    Service,
    UnknownProjectError,
    http_status,
    subject_id,
    subject_uri,
)
from tagalign.suggest import LIMIT, THRESHOLD, Bound, Suggestion, SuggestRequest
from tagalign.text.language import detect_language

PREFIX = "/v1"
ANNIF_API_VERSION = "1.4.3"  # the Annif release whose OpenAPI document this follows
MAX_BATCH = 32  # Annif's suggest-batch limit


def problem(status: int, title: str, detail: str) -> JSONResponse:
    """An RFC 7807 problem answered as ``application/problem+json``."""
    return JSONResponse({"type": "about:blank", "title": title, "status": status,
                         "detail": detail}, status, media_type="application/problem+json")


def error_response(exc: Exception, project_id: str | None) -> JSONResponse:
    """The problem Annif answers for an error of the service (`service.http_status`),
    with Annif's titles (and its own wording where Annif has one)."""
    status = http_status(exc)
    if isinstance(exc, UnknownProjectError):
        return problem(status, "Project not found", f"Project '{exc.project_id}' not found")
    if isinstance(exc, LearningNotAllowedError):  # Annif's answer for allow_learn = false
        return problem(status, "Learning not allowed", f"Project '{project_id}' is not "
                       "configured to allow learning via API")
    if isinstance(exc, ReadOnlyError):  # Annif's document declares 403 for learn, not 409
        return problem(403, "Operation is not allowed", str(exc))
    if status == 503:
        return problem(status, "Service unavailable", str(exc))
    return problem(status, HTTPStatus(status).phrase, str(exc))


# -- request bodies (Annif's schemas; extra properties allowed as in Annif's document) --
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Document(_Open):
    text: StrictStr
    document_id: StrictStr | None = None
    metadata: dict[str, StrictStr] | None = None


class BatchBody(_Open):
    documents: list[Document] = Field(..., max_length=MAX_BATCH)


class SubjectRef(_Open):
    uri: StrictStr
    label: StrictStr | None = None


class IndexedDocument(_Open):
    text: StrictStr | None = None
    metadata: dict[str, StrictStr] | None = None
    subjects: list[SubjectRef] | None = None


class DetectBody(_Open):
    text: StrictStr
    languages: list[StrictStr] = Field(..., min_length=1, max_length=5)


LEARN_BODY = TypeAdapter(list[IndexedDocument])


def split_text(text: str) -> tuple[str, str]:
    """Annif's single ``text`` → ``(title, abstract)``: first non-empty line, then the rest."""
    lines = text.strip().splitlines()
    if not lines:
        return "", ""
    return lines[0].strip(), "\n".join(lines[1:]).strip()


def _validation_detail(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                     for e in exc.errors()[:5])


def _parse(model: Callable[[Any], Any], data: Any) -> Any:
    try:
        return model(data)
    except ValidationError as exc:
        raise InputError(_validation_detail(exc)) from None


async def _json(request: Request) -> Any:
    """The JSON body (its Content-Type was checked by `tagalign.serve.guard`: 415)."""
    raw = await request.body()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"body is not valid UTF-8 JSON ({exc})") from None
    except RecursionError:  # e.g. 100,000 "[": nested deeper than the parser goes
        raise InputError("body is not valid JSON: nested too deeply") from None


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form (Annif's document) or multipart form (Annif accepts it too)."""
    kind = request.headers.get("content-type", "")
    if not kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        raise InputError("expected a form body (application/x-www-form-urlencoded)")
    out: dict[str, str] = {}
    async with request.form() as form:  # a malformed multipart body is a 400 (Starlette)
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):  # a text sent as a file part
                try:
                    value = (await value.read()).decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{key}: not UTF-8 text") from None
            out.setdefault(key, value)
    return out


def _number(value: Any, bound: Bound, kind: type, *, cap: bool = False) -> Any:
    """A form or query value within ``bound`` (`tagalign.suggest`, with its one message);
    ``cap``: Annif's document sets no maximum, so a larger value gets the bound's rather
    than a 400."""
    try:
        x = kind(value)
    except (TypeError, ValueError):
        raise InputError(f"{bound.name}: not {'an integer' if kind is int else 'a number'}: "
                          f"{str(value)[:40]!r}") from None
    if cap and bound.high is not None and x > bound.high:
        return kind(bound.high)
    if not bound.holds(x):  # also refuses NaN
        raise InputError(f"{bound.name}: {bound.message}")
    return x


def _versioned(response: Response, version: str | None) -> None:
    if version:
        response.headers["X-Model-Version"] = version


def _options(values: Mapping[str, Any]) -> tuple[int | None, float | None, str | None]:
    """limit, threshold (None when not given: the project's saved ones), language. Annif's
    document gives the limit no maximum: one over `tagalign.suggest.MAX_LIMIT` gets that."""
    limit = values.get("limit")
    threshold = values.get("threshold")
    if limit is not None:
        limit = _number(limit, LIMIT, int, cap=True)
    if threshold is not None:
        threshold = _number(threshold, THRESHOLD, float)
    language = values.get("language")
    if language is not None and not isinstance(language, str):
        raise InputError("language: not a string")
    return limit, threshold, language or None


router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("/")
def show_info() -> dict[str, str]:
    try:
        ours = version("tagalign")
    except PackageNotFoundError:
        ours = "dev"
    # "version" is the Annif API version this follows: clients compare it with Annif's
    return {"title": f"Annif REST API (tagalign {ours})", "version": ANNIF_API_VERSION}


@router.get("/vocabs")
def list_vocabs(svc: ServiceDep) -> dict[str, list[dict[str, Any]]]:
    seen: dict[str, dict[str, Any]] = {}
    for proj in svc.projects.values():
        seen.setdefault(_vocab_id(svc, proj), _vocab_dump(svc, proj))
    return {"vocabs": list(seen.values())}


@router.get("/projects")
def list_projects(svc: ServiceDep) -> dict[str, list[dict[str, Any]]]:
    return {"projects": [_project_dump(svc, served) for served in svc.all_served()]}


@router.get("/projects/{project_id}")
def show_project(project: ProjectDep, svc: ServiceDep) -> dict[str, Any]:
    return _project_dump(svc, project.served)


@router.post("/projects/{project_id}/suggest")
async def suggest(project: ProjectDep, svc: ServiceDep, request: Request, response: Response
                  ) -> dict[str, Any]:
    form = await _form(request)
    if "text" not in form:
        raise InputError("text: field required")
    limit, threshold, language = _options(form)
    version, out = await run_in_threadpool(_suggest_texts, svc, project.served,
                                           [form["text"]], limit, threshold, language)
    _versioned(response, version)
    return out[0]


@router.post("/projects/{project_id}/suggest-batch")
async def suggest_batch(project: ProjectDep, svc: ServiceDep, request: Request,
                        response: Response) -> list[dict[str, Any]]:
    limit, threshold, language = _options(request.query_params)
    body = _parse(BatchBody.model_validate, await _json(request))
    version, out = await run_in_threadpool(_suggest_texts, svc, project.served,
                                           [d.text for d in body.documents], limit,
                                           threshold, language)
    _versioned(response, version)
    return [{**r, "document_id": d.document_id}
            for r, d in zip(out, body.documents, strict=True)]


@router.post("/projects/{project_id}/learn", status_code=204)
async def learn(project: ProjectDep, svc: ServiceDep, request: Request) -> Response:
    docs = _parse(LEARN_BODY.validate_python, await _json(request))
    items = decisions(svc.learnable(project.served), docs)
    await run_in_threadpool(svc.learn, project.served, items)
    return Response(status_code=204, headers={"content-type": "application/json"})


@router.post("/detect-language")
async def detect(request: Request) -> dict[str, Any]:
    body = _parse(DetectBody.model_validate, await _json(request))
    if any(not 2 <= len(lang) <= 3 for lang in body.languages):
        raise InputError("languages: each must be a 2 or 3 letter code")
    try:  # off the event loop: simplemma is pure Python (text cut at MAX_TEXT)
        ranked = await run_in_threadpool(detect_language, body.text, body.languages)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return {"results": [{"language": lang, "score": score} for lang, score in ranked]}


def _suggest_texts(svc: Service, served: Served, texts: list[str], limit: int | None,
                   threshold: float | None, language: str | None
                   ) -> tuple[str | None, list[dict[str, list[dict[str, Any]]]]]:
    """The answers, and the version of the model that gave them (X-Model-Version, as
    on tagalign's API: a header, so Annif's bodies stay Annif's)."""
    proj = served.project
    if language is not None and language not in proj.vocab.languages:
        raise InputError(f'language "{language}" not supported by vocabulary')
    svc.require_trained(served)  # Annif: 503 for a project without a model
    # no language: the recipes identify it (`tagalign.text.guess_language`)
    recs = [Record(id=str(i), title=t, abstract=a)
            for i, (t, a) in enumerate(map(split_text, texts))]
    answered, tagged = svc.suggest(
        served, recs, SuggestRequest(limit=limit, threshold=threshold, quality=False),
        default_limit=ANNIF_DEFAULT_LIMIT)
    version = answered.model_version.get("version") if answered.model_version else None
    return version, [_results(proj, t.suggestions, language) for t in tagged]


def _vocab_id(svc: Service, proj: Project) -> str:
    fingerprints = sorted({p.vocab.fingerprint for p in svc.projects.values()})
    return "gnd" if len(fingerprints) == 1 else f"gnd-{proj.vocab.fingerprint[:8]}"


def _vocab_dump(svc: Service, proj: Project) -> dict[str, Any]:
    out = {"vocab_id": _vocab_id(svc, proj), "languages": proj.vocab.languages,
           "size": proj.vocab.n_suggestable, "loaded": True}  # retired ones not counted
    # a vocabulary updated by change files: its state as the project records it (what
    # tagalign's own API shows as ``vocabulary_state``); Annif's schema allows properties
    # of its own, and a project never updated is described as Annif describes one
    state = proj.config.vocabulary.get("state")
    if state is not None:
        out["state"] = state
    return out


def _label_language(proj: Project) -> str | None:
    langs = proj.vocab.languages
    return proj.language or (langs[0] if langs else None)


def _project_dump(svc: Service, served: Served) -> dict[str, Any]:
    proj = served.project
    language = _label_language(proj)
    return {"project_id": served.id, "name": proj.name or served.id,
            "language": language or "de",
            "backend": {"backend_id": proj.config.recipe or "unknown"},
            "vocab": _vocab_dump(svc, proj), "vocab_language": language,
            "is_trained": proj.is_trained,
            "modification_time": proj.config.trained_at}


def _results(proj: Project, rows: list[Suggestion], language: str | None
             ) -> dict[str, list[dict[str, Any]]]:
    # labels in the requested language, else the project's (vocab_language), as in Annif
    language = language or _label_language(proj) or "de"
    return {"results": [{"uri": subject_uri(s.id), "label": proj.vocab.label(s.id, language),
                         "notation": None, "score": round(float(s.score), 6)}
                        for s in rows]}  # limit and threshold: cut by the service


def decisions(proj: Project, docs: list[IndexedDocument]) -> list[Decision]:
    """Annif's learn documents as accepted decisions: those without text or without a
    subject of the vocabulary are skipped, subjects outside it ignored (as Annif does), a
    redirected heading's read as its target's, a deleted or split one's ignored as an
    unknown one is (`Vocabulary.successor`); record id ``annif:`` + the first 16 hex
    digits of the text's SHA-256."""
    items = []
    vocab = proj.vocab
    for doc in docs:
        if not doc.text or not doc.subjects:
            continue
        ids = list(dict.fromkeys(subject_id(s.uri) for s in doc.subjects))
        known = list(dict.fromkeys(now for sid in ids if sid in vocab
                                   and (now := vocab.successor(sid)) is not None))
        if not known:
            continue
        title, abstract = split_text(doc.text)
        rid = "annif:" + hashlib.sha256(doc.text.encode("utf-8")).hexdigest()[:16]
        items.append(Decision(Record(id=rid, title=title, abstract=abstract,
                                     subjects=known), known))
    return items


def is_annif_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


__all__ = ["ANNIF_API_VERSION", "GND_URI", "MAX_BATCH", "PREFIX", "error_response",
           "is_annif_path", "problem", "router", "split_text"]
