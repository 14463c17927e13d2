"""Request and response bodies of the REST API (pydantic; OpenAPI at /docs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tagalign.project import DEFAULT_LIMIT
from tagalign.suggest import LIMIT, THRESHOLD, Bound

Language = Literal["de", "en"]


def _check(bound: Bound) -> AfterValidator:
    """A request bound's check (`tagalign.suggest`), with its one message: ``limit: must
    be between 0 and 1000`` in a 422's detail."""
    def check(value: float) -> float:
        if not bound.holds(value):
            raise PydanticCustomError("out_of_range", bound.message)
        return value
    return AfterValidator(check)


def _schema(bound: Bound, kind: str) -> WithJsonSchema:
    """The bound's range in the OpenAPI document, on a value of JSON type ``kind``."""
    schema: dict[str, Any] = {"type": kind, "minimum": bound.low}
    if bound.high is not None:
        schema["maximum"] = bound.high
    return WithJsonSchema(schema)


#: a request's limit and threshold as both bodies take them (None: the project's)
Limit = Annotated[int, _check(LIMIT), _schema(LIMIT, "integer")]
Threshold = Annotated[float, _check(THRESHOLD), _schema(THRESHOLD, "number")]


class RecordIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(..., max_length=5000,
                       description="Title of the record (blank with a blank abstract: no "
                                   "suggestions and a warning).")
    abstract: str = Field("", max_length=100_000, description="Abstract (may be empty).")
    language: Language | None = Field(None, description="de or en; guessed when omitted.")


EXCLUDE: list[str] = Field([], max_length=10_000,
                description="Subject ids or GND URIs never to return (on top of the "
                            "project's rules); the limit is filled from the others.")


class SuggestBody(RecordIn):
    """One record and the options of its request (`tagalign.suggest.SuggestRequest`)."""

    limit: Limit | None = Field(None, description="Most subjects to return (default: the "
                                                  f"project's limit, else {DEFAULT_LIMIT}).")
    threshold: Threshold | None = Field(None, description="Drop scores below this (default: "
                                                          "the project's threshold, else 0).")
    exclude: list[str] = EXCLUDE


class BatchRecord(RecordIn):
    id: str | None = Field(None, max_length=200)


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    records: list[BatchRecord] = Field(..., min_length=1, max_length=256)
    limit: Limit | None = None
    threshold: Threshold | None = None
    exclude: list[str] = EXCLUDE


class SuggestionOut(BaseModel):
    id: str
    label: str
    score: float
    reasons: dict[str, Any] = {}


class QualityOut(BaseModel):
    """Estimated quality of one record's returned list (learned on held-out records)."""

    recall: float = Field(..., ge=0.0, le=1.0,
                          description="Expected share of the record's right subjects in it.")
    precision: float = Field(..., ge=0.0, le=1.0,
                             description="Expected share of it that is right.")


class DomainOut(BaseModel):
    """One domain of the record (the shape of `tagalign classify predict`'s labels)."""

    label: str = Field(..., description="The domain's code (e.g. a LinSearch code).")
    score: float = Field(..., ge=0.0, le=1.0, description="The domain model's score.")


DOMAINS_HELP = ("The record's domains, best first, from the project's domain model (text and "
                "these suggestions together); null when the project has none.")

QUALITY_HELP = ("Estimated quality of the results; null when the project's recipe has no "
                "estimator or the record has no text.")


class SuggestResponse(BaseModel):
    results: list[SuggestionOut]
    warning: str | None = Field(None, description="Why the results are empty or partial "
                                                  "(e.g. a record without text); else null.")
    quality: QualityOut | None = Field(None, description=QUALITY_HELP)
    domains: list[DomainOut] | None = Field(None, description=DOMAINS_HELP)


class BatchResponse(BaseModel):
    results: list[list[SuggestionOut]]
    warnings: list[str | None] = Field([], description="One warning or null per record.")
    qualities: list[QualityOut | None] = Field([], description="One quality estimate or "
                                               "null per record (see SuggestResponse).")
    domains: list[list[DomainOut] | None] | None = Field(
        None, description="One list of domains or null per record (see SuggestResponse); "
                          "null when the project has no domain model.")


class LearnRecord(RecordIn):
    id: str = Field(..., min_length=1, max_length=200)

    @field_validator("title")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v
    subjects: list[str] = Field(..., max_length=500, description="Accepted subject ids.")
    rejected: list[str] = Field([], max_length=500, description="Rejected subject ids.")
    added: list[str] = Field([], max_length=500, description="The subjects of subjects and "
                             "rejected that the librarian found by searching the vocabulary "
                             "rather than among the suggestions (the catalogue export marks "
                             "them intellectual, an accepted suggestion confirmed).")

    @model_validator(mode="after")
    def _disjoint(self) -> LearnRecord:
        both = sorted(set(self.subjects) & set(self.rejected))
        if both:
            raise ValueError(f"subjects and rejected share {', '.join(both[:5])}")
        stray = sorted(set(self.added) - set(self.subjects) - set(self.rejected))
        if stray:
            raise ValueError(f"added names subjects neither accepted nor rejected: "
                             f"{', '.join(stray[:5])}")
        return self


class LearnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    records: list[LearnRecord] = Field(..., min_length=1, max_length=256)


class LearnResponse(BaseModel):
    stored: int
    learned: bool
    redirected: dict[str, str] | None = Field(
        None, description="Subject ids of headings redirected since (`tagalign vocab "
        "update`) that the request named, each with the target it was stored and learned "
        "as; absent when it named none.")


class ModelVersionOut(BaseModel):
    """Which model: a short hash of its manifest (``model/recipe.json``) and when it was
    saved (`tagalign.project.model_version`)."""

    version: str
    trained_at: str | None


class WorkerModelOut(BaseModel):
    """The model one worker process serves for a project (they differ while a reload goes
    through the workers)."""

    pid: int
    version: str | None
    trained_at: str | None
    loaded_at: str | None = None


StoreState = Literal["ok", "unavailable", "no_space"]


class LearningOut(BaseModel):
    """Whether learn requests to the project are taken now (`tagalign.serve.health`)."""

    state: Literal["on", "off", "paused"] = Field(
        ..., description="off: the project does not learn; paused: its feedback store is "
                         "unavailable (learn answers 503) or full (507) until it is back")
    reason: Literal["allow_learn", "read_only", "unavailable", "no_space"] | None = Field(
        None, description="Why off (allow_learn not set, read_only) or paused (the store's "
                          "state); null when on")
    since: str | None = Field(None, description="When the pause began (ISO 8601, UTC)")


class ProjectOut(BaseModel):
    id: str
    name: str | None
    recipe: str | None
    vocabulary_size: int
    languages: list[str]
    trained_at: str | None
    dev_scores: dict[str, Any] | None = None
    read_only: bool = Field(False, description="Served with --mmap: learn answers 409")
    trained: bool = Field(True, description="False: suggest answers 503 until trained")
    language: str | None = None
    allow_learn: bool = Field(False, description="False: learn answers 403")
    rules: dict[str, list[str]] = Field({}, description="Vocabulary rules (exclude, include)")
    excluded: int = Field(0, description="Subjects the rules exclude")
    vocabulary_state: dict[str, Any] | None = Field(
        None, description="Change files applied since training (`tagalign vocab update`; "
        "null: none)")
    model_version: ModelVersionOut | None = Field(
        None, description="The model the answering worker serves (null: not trained)")
    worker: int | None = Field(None, description="pid of the worker process that answered")
    workers: list[WorkerModelOut] = Field(
        [], description="Every worker's model for this project (`tagalign serve --workers`)")
    learning: LearningOut = Field(
        ..., description="Whether learn is taken now, as the answering worker sees the store")


class ModelCheckOut(BaseModel):
    status: Literal["ok", "not_trained"] = Field(..., description="not_trained: suggest "
                                                 "answers 503")
    trained: bool = Field(..., description="A trained model is loaded")
    version: str | None = Field(None, description="The model served (manifest hash)")
    trained_at: str | None = None
    loaded_at: str | None = Field(None, description="When this worker loaded it (ISO 8601)")


class StoreCheckOut(BaseModel):
    status: StoreState = Field(..., description="unavailable: learns answer 503; no_space: "
                                                "507")
    since: str | None = Field(None, description="When the outage began (null while ok)")
    last_reachable: str | None = Field(None, description="When a statement last ran on the "
                                       "store in this worker (null: none yet)")


class ProjectCheckOut(BaseModel):
    status: Literal["ok", "degraded"]
    model: ModelCheckOut
    feedback_store: StoreCheckOut


class HealthOut(BaseModel):
    """``GET /health``: always 200 while the process answers; ``degraded`` names what is
    not ok in ``checks`` (a project untrained, a feedback store away or full)."""

    status: Literal["ok", "degraded"]
    projects: int = Field(..., description="Projects served")
    checks: dict[str, ProjectCheckOut] = Field(..., description="Per project id")


class LiveOut(BaseModel):
    status: Literal["ok"]


class ReadyOut(BaseModel):
    """``GET /health/ready``: 200 when ready for traffic, else 503 saying why."""

    status: Literal["ready", "not_ready"]
    reason: str | None = Field(None, description="Why not ready; null when ready")
    suggest: dict[str, bool] = Field({}, description="Per project id: whether it can "
                                                     "suggest")


class ReloadOut(BaseModel):
    project: str
    status: Literal["reloaded", "unchanged"] = Field(
        ..., description="unchanged: the folder's model is the one served (nothing loaded)")
    model_version: ModelVersionOut | None
    previous_version: ModelVersionOut | None
    seconds: float = Field(..., description="Time to load, check and swap in the model")
    learned: int = Field(0, description="Records learned since the server started, taught "
                                        "to the new model")
    worker: int = Field(..., description="pid of the worker that reloaded")
    others_asked: bool = Field(False, description="The other workers were asked to reload "
                                                  "(each in the background; GET the project "
                                                  "to see their versions)")


class RecordOut(BaseModel):
    id: str
    title: str
    abstract: str
    language: str | None
    subjects: list[str]


class ErrorOut(BaseModel):
    detail: str


class ValidationErrorOut(BaseModel):
    """422 body: one line naming each bad field, and the same as a list."""

    detail: str
    errors: list[dict[str, str]] = Field([], description="{field, type, msg} per error.")


class SubjectOut(BaseModel):
    id: str
    label: str = Field(..., description="Preferred label in the language that matched.")
    matched: str = Field(..., description="The label (preferred or alternate) that starts "
                                          "with the prefix.")
    language: str = Field(..., description="Language of the matched label.")
    labels: dict[str, str] = Field({}, description="Preferred label per language.")
    uri: str = Field(..., description="The subject's GND record.")


class SubjectsOut(BaseModel):
    subjects: list[SubjectOut]


class QueueOut(BaseModel):
    """Where a review queue stands for one project."""

    name: str = Field(..., description="Identifies the records file; progress is kept per "
                                       "project and name.")
    size: int = Field(..., description="Records to review.")
    finished: int = Field(..., description="Records finished so far.")
    position: int | None = Field(..., description="First record not finished yet (0-based); "
                                                  "null when all are.")
    release_above: float | None = Field(None, description="Records whose estimated recall "
                                                          "is at least this are released "
                                                          "without review.")
    estimated: bool = Field(False, description="Whether quality estimates chose the records "
                                               "(else the queue holds all of them).")
    skipped: int = Field(0, description="Records left out as released.")


class QueueItemOut(BaseModel):
    position: int
    size: int
    finished: bool = Field(..., description="This record is finished already.")
    record: RecordOut
    decisions: dict[str, Literal["accept", "reject"]] = Field(
        {}, description="Latest decision per subject stored for this record so far.")
    labels: dict[str, str] = Field({}, description="Label of each subject in decisions.")
    added: list[str] = Field([], description="The accepted subjects of decisions a librarian "
                             "added by search (not suggested).")
