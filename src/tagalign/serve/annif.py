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
  that learn online, and
  answers 204; subjects outside the vocabulary are ignored, as Annif does. A project
  served with ``--mmap`` is read-only: learn answers 403 (Annif's "Operation is not
  allowed") and stores nothing.

Bodies are parsed and validated here rather than by FastAPI, so that every failure gets
Annif's status and shape; these routes stay out of tagalign's OpenAPI document (Annif's
own document describes them). Like Annif, suggest also takes multipart forms, and the
Annif routes allow cross-origin requests from any origin (CORS), so browser-based
catalogue plugins work.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr, TypeAdapter, ValidationError
from starlette.datastructures import UploadFile

from tagalign.project import Project, ReadOnlyError
from tagalign.records import Record
from tagalign.serve.feedback import Decision, FeedbackStore
from tagalign.suggest import Suggestion
from tagalign.text.language import detect_language

PREFIX = "/v1"
GND_URI = "https://d-nb.info/gnd/"
ANNIF_API_VERSION = "1.4.3"  # the Annif release whose OpenAPI document this follows
MAX_BATCH = 32  # Annif's suggest-batch limit
MAX_LIMIT = 1000  # Annif has no upper bound; more than this many results are never useful


class Problem(Exception):
    """An RFC 7807 problem answered as ``application/problem+json``."""

    def __init__(self, status: int, title: str, detail: str):
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail

    def response(self) -> JSONResponse:
        return JSONResponse({"type": "about:blank", "title": self.title,
                             "status": self.status, "detail": self.detail},
                            self.status, media_type="application/problem+json")


def bad_request(detail: str) -> Problem:
    return Problem(400, "Bad Request", detail)


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


def subject_id(uri: str) -> str:
    """``https://d-nb.info/gnd/4015065-3`` (or http://, or the bare id) → ``4015065-3``."""
    for prefix in (GND_URI, "http://d-nb.info/gnd/", "gnd:"):
        if uri.startswith(prefix):
            return uri[len(prefix):]
    return uri


def _validation_detail(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                     for e in exc.errors()[:5])


def _parse(model: Callable[[Any], Any], data: Any) -> Any:
    try:
        return model(data)
    except ValidationError as exc:
        raise bad_request(_validation_detail(exc)) from None


async def _json(request: Request) -> Any:
    if "json" not in request.headers.get("content-type", ""):
        raise bad_request("expected a JSON body (Content-Type: application/json)")
    raw = await request.body()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad_request(f"body is not valid UTF-8 JSON ({exc})") from None


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form (Annif's document) or multipart form (Annif accepts it too)."""
    kind = request.headers.get("content-type", "")
    if not kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        raise bad_request("expected a form body (application/x-www-form-urlencoded)")
    out: dict[str, str] = {}
    async with request.form() as form:  # a malformed multipart body is a 400 (Starlette)
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):  # a text sent as a file part
                try:
                    value = (await value.read()).decode("utf-8")
                except UnicodeDecodeError:
                    raise bad_request(f"{key}: not UTF-8 text") from None
            out.setdefault(key, value)
    return out


def _number(value: Any, name: str, kind: type, low: float, high: float | None) -> Any:
    try:
        x = kind(value)
    except (TypeError, ValueError):
        raise bad_request(f"{name}: not {'an integer' if kind is int else 'a number'}: "
                          f"{str(value)[:40]!r}") from None
    if not (x >= low and (high is None or x <= high)):  # also refuses NaN
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise bad_request(f"{name}: must be {bounds}")
    return x


def _options(values: Mapping[str, Any]) -> tuple[int, float, str | None]:
    limit = _number(values.get("limit", 10), "limit", int, 0, None)
    threshold = _number(values.get("threshold", 0.0), "threshold", float, 0.0, 1.0)
    language = values.get("language")
    if language is not None and not isinstance(language, str):
        raise bad_request("language: not a string")
    return limit, threshold, language or None


def create_router(projects: Mapping[str, Project], store: FeedbackStore,
                  on_learn: Callable[[list[Decision]], None] | None = None) -> APIRouter:
    """The Annif routes; ``on_learn`` sees the decisions learned (neighbour titles)."""
    router = APIRouter(prefix=PREFIX, include_in_schema=False)

    def project(project_id: str) -> Project:
        if project_id not in projects:
            raise Problem(404, "Project not found", f"Project '{project_id}' not found")
        return projects[project_id]

    def vocab_id(proj: Project) -> str:
        fingerprints = sorted({p.vocab.fingerprint for p in projects.values()})
        return "gnd" if len(fingerprints) == 1 else f"gnd-{proj.vocab.fingerprint[:8]}"

    def vocab_dump(proj: Project) -> dict[str, Any]:
        return {"vocab_id": vocab_id(proj), "languages": list(proj.vocab.languages),
                "size": len(proj.vocab), "loaded": True}

    def project_dump(pid: str, proj: Project) -> dict[str, Any]:
        langs = list(proj.vocab.languages)
        return {"project_id": pid, "name": proj.config.get("name") or pid,
                "language": langs[0] if langs else "de",
                "backend": {"backend_id": proj.config.get("recipe") or "unknown"},
                "vocab": vocab_dump(proj), "vocab_language": langs[0] if langs else None,
                "is_trained": proj.is_trained,
                "modification_time": proj.config.get("trained_at")}

    def results(proj: Project, rows: list[Suggestion], limit: int, threshold: float,
                language: str | None) -> dict[str, list[dict[str, Any]]]:
        # labels in the requested language, else the project's (vocab_language), as in Annif
        language = language or (proj.vocab.languages or ["de"])[0]
        out = [{"uri": GND_URI + s.id, "label": proj.vocab.label(s.id, language),
                "notation": None, "score": round(float(s.score), 6)}
               for s in rows if s.score >= threshold]
        return {"results": out[:limit]}

    def suggest_texts(proj: Project, texts: list[str], limit: int, threshold: float,
                      language: str | None) -> list[dict[str, list[dict[str, Any]]]]:
        if language is not None and language not in proj.vocab.languages:
            raise bad_request(f'language "{language}" not supported by vocabulary')
        # no language: the recipes identify it (`tagalign.text.guess_language`)
        recs = [Record(id=str(i), title=t, abstract=a)
                for i, (t, a) in enumerate(map(split_text, texts))]
        todo = [i for i, r in enumerate(recs) if r.title or r.abstract]
        rows: list[list[Suggestion]] = [[] for _ in recs]
        if todo and limit > 0:
            found = proj.suggest([recs[i] for i in todo], limit=min(limit, MAX_LIMIT))
            for i, row in zip(todo, found, strict=True):
                rows[i] = row
        return [results(proj, row, limit, threshold, language) for row in rows]

    @router.get("/")
    def show_info() -> dict[str, str]:
        try:
            ours = version("tagalign")
        except PackageNotFoundError:
            ours = "dev"
        # "version" is the Annif API version this follows: clients compare it with Annif's
        return {"title": f"Annif REST API (tagalign {ours})", "version": ANNIF_API_VERSION}

    @router.get("/vocabs")
    def list_vocabs() -> dict[str, list[dict[str, Any]]]:
        seen: dict[str, dict[str, Any]] = {}
        for proj in projects.values():
            seen.setdefault(vocab_id(proj), vocab_dump(proj))
        return {"vocabs": list(seen.values())}

    @router.get("/projects")
    def list_projects() -> dict[str, list[dict[str, Any]]]:
        return {"projects": [project_dump(pid, p) for pid, p in projects.items()]}

    @router.get("/projects/{project_id}")
    def show_project(project_id: str) -> dict[str, Any]:
        return project_dump(project_id, project(project_id))

    @router.post("/projects/{project_id}/suggest")
    async def suggest(project_id: str, request: Request) -> dict[str, Any]:
        form = await _form(request)
        if "text" not in form:
            raise bad_request("text: field required")
        limit, threshold, language = _options(form)
        proj = project(project_id)
        out = await run_in_threadpool(suggest_texts, proj, [form["text"]], limit, threshold,
                                      language)
        return out[0]

    @router.post("/projects/{project_id}/suggest-batch")
    async def suggest_batch(project_id: str, request: Request) -> list[dict[str, Any]]:
        limit, threshold, language = _options(request.query_params)
        body = _parse(BatchBody.model_validate, await _json(request))
        proj = project(project_id)
        out = await run_in_threadpool(suggest_texts, proj, [d.text for d in body.documents],
                                      limit, threshold, language)
        return [{**r, "document_id": d.document_id}
                for r, d in zip(out, body.documents, strict=True)]

    @router.post("/projects/{project_id}/learn", status_code=204)
    async def learn(project_id: str, request: Request) -> Response:
        docs = _parse(LEARN_BODY.validate_python, await _json(request))
        proj = project(project_id)
        try:
            proj.check_learnable()
        except ReadOnlyError as exc:  # Annif's document: 403 "Operation is not allowed"
            raise Problem(403, "Operation is not allowed", str(exc)) from None
        items = []
        for doc in docs:
            if not doc.text or not doc.subjects:
                continue  # Annif skips documents without text or subjects
            ids = list(dict.fromkeys(subject_id(s.uri) for s in doc.subjects))
            known = [sid for sid in ids if sid in proj.vocab]
            if not known:
                continue
            title, abstract = split_text(doc.text)
            rid = "annif:" + hashlib.sha256(doc.text.encode("utf-8")).hexdigest()[:16]
            items.append(Decision(Record(id=rid, title=title, abstract=abstract,
                                         subjects=known), known))
        if items:
            await run_in_threadpool(_learn, proj, project_id, items)
            if on_learn:
                on_learn(items)
        return Response(status_code=204, headers={"content-type": "application/json"})

    def _learn(proj: Project, project_id: str, items: list[Decision]) -> None:
        store.add(project_id, items)
        # a recipe without online learning: stored for the next `tagalign train`
        proj.learn([d.record for d in items])

    @router.post("/detect-language")
    async def detect(request: Request) -> dict[str, Any]:
        body = _parse(DetectBody.model_validate, await _json(request))
        if any(not 2 <= len(lang) <= 3 for lang in body.languages):
            raise bad_request("languages: each must be a 2 or 3 letter code")
        try:
            ranked = detect_language(body.text, body.languages)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return {"results": [{"language": lang, "score": score} for lang, score in ranked]}

    return router


def is_annif_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")
