"""REST bodies through Schemathesis with API tokens on (issue 46): a real server on
localhost (toy project, review queue, a tokens file), the operations a token protects on
both APIs (tagalign's learn, reload and the queue's finish by its own document; Annif's
learn by Annif's). The open operations answer the same with tokens on or off, and
tests/test_serve_abuse.py and tests/test_serve_annif.py fuzz them.

- With a good token in the header: valid bodies (every default check: no 5xx, status codes,
  content types and bodies as the document says, and Schemathesis' own probe that the
  request without the token is refused) and invalid ones (never a server error); each
  operation gets past the token check and its handler answers.
- Without a token (Schemathesis then sends tokens of its own), and with one never issued:
  401 or 403 in the API's error shape with a Bearer challenge; never a server error.
- Nothing the server logs while it runs carries a traceback.

Hypothesis runs derandomized (`serving.fuzz`); `EXAMPLES` per operation and mode.
"""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest
import schemathesis
from schemathesis.checks import not_a_server_error, positive_data_acceptance

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer, annif_openapi, fuzz
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings
from tagalign.serve.app import create_app
from tagalign.serve.auth import needs_token
from tagalign.serve.queue import RecordQueue
from tagalign.serve.tokens import TokenStore
from test_subject_queue import QUEUE
from tiny_models import tiny_records, tiny_vocab

EXAMPLES = 8


class _Logged(logging.Handler):
    """Every record the server logs with a traceback (uvicorn's "Exception in ASGI
    application", an error handler's ``log.exception``)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.bad: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.bad.append(self.format(record))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("restfuzz")
    Project.create(root / "toy", tiny_vocab(), "test-overlap", {}).train(tiny_records(40))
    store = TokenStore(root / "tokens.toml")
    token = store.add("fuzzer")
    project = Project.load(root / "toy", serving=ServingSettings(allow_learn=True))
    app = create_app({"toy": project}, FeedbackStore.for_project(root / "toy"),
                     review=RecordQueue(QUEUE[:3]), tokens=TokenStore.read(store.path))
    srv = LiveServer(app)  # uvicorn's logging is configured here: our handler after it
    logged = _Logged()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]  # uvicorn's: no propagation
    for logger in loggers:
        logger.addHandler(logged)
    try:
        with srv:
            srv.token, srv.logged = token, logged
            yield srv
    finally:
        for logger in loggers:
            logger.removeHandler(logged)
    assert logged.bad == []


class Seen:
    """A Schemathesis check that records every answer by (operation, status, whether the
    request carried an ``Authorization`` header): Schemathesis also sends each request of
    a protected operation once without it (its ``ignored_auth`` check)."""

    def __init__(self):
        self.statuses: Counter[tuple[str, int, bool]] = Counter()
        self.answers: dict[tuple[str, int, bool], tuple] = {}

    def check(self, ctx, response, case) -> bool:
        authed = "authorization" in {k.lower() for k in response.request.headers}
        key = (f"{case.method.upper()} {case.operation.path}", response.status_code, authed)
        self.statuses[key] += 1
        self.answers.setdefault(key, (response.headers, response.text))
        return True

    def summary(self) -> dict[str, int]:
        return {f"{op} {status}{'' if authed else ' (no token)'}": n
                for (op, status, authed), n in sorted(self.statuses.items())}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _protected(schema, prefix: str = ""):
    """The operations that need a token (`tagalign.serve.auth.needs_token`)."""
    return schema.include(lambda ctx: needs_token(ctx.operation.method,
                                                  prefix + ctx.operation.path))


def _own(live):
    return schemathesis.openapi.from_url(f"{live.url}/openapi.json")


def _check_refusals(seen: Seen, annif: bool) -> None:
    """Every answer to a request without a good token: 401 without the header (or with
    another scheme, or an empty token), else 403; its API's error shape, a Bearer
    challenge."""
    assert seen.statuses
    for (op, got, authed), (headers, text) in seen.answers.items():
        assert got in ((401, 403) if authed else (401,)), (op, got, authed, text)
        assert headers["www-authenticate"][0].startswith("Bearer"), (op, headers)
        if annif:
            assert headers["content-type"] == ["application/problem+json"], (op, headers)
            assert json.loads(text)["status"] == got and "API token" in text
        else:
            assert headers["content-type"] == ["application/json"], (op, headers)
            assert "API token" in json.loads(text)["detail"]


PROTECTED = {"GET /tagalign/v1/projects/{project_id}/decisions",
             "POST /tagalign/v1/projects/{project_id}/learn",
             "POST /tagalign/v1/projects/{project_id}/reload",
             "POST /tagalign/v1/projects/{project_id}/queue/{position}/finish"}


def test_own_api_protected_operations_with_a_token(live):
    """Valid bodies: every default check, the ``ignored_auth`` probe included; invalid
    ones: never a server error. With the token each operation reaches its handler."""
    seen = Seen()
    schema = _protected(_own(live))
    positive = fuzz(schema, live.url, examples=EXAMPLES, headers=_bearer(live.token),
                    path_parameters={"project_id": "toy"},
                    excluded_checks=[positive_data_acceptance], additional_checks=[seen.check])
    negative = fuzz(schema, live.url, examples=EXAMPLES, modes=("negative",),
                    headers=_bearer(live.token), path_parameters={"project_id": "toy"},
                    checks=[not_a_server_error, seen.check])
    print("schemathesis examples (tagalign's document, token):", positive, negative,
          seen.summary())
    assert {op.split(" ", 1)[1] for op in positive} == PROTECTED
    assert all(n >= EXAMPLES // 2 for n in positive.values()), positive
    for op in PROTECTED:  # past the token check: the handler answered, successfully too
        with_token = {s for o, s, authed in seen.statuses if o == op and authed}
        assert with_token and with_token.isdisjoint({401, 403}), (op, with_token)
        if not op.endswith("/learn"):  # learn: schema-valid ids are not the vocabulary's
            assert any(s < 300 for s in with_token), (op, with_token)
        assert {s for o, s, authed in seen.statuses if o == op and not authed} <= {401}
    assert live.logged.bad == []


@pytest.mark.parametrize("token", [None, "tga_never-issued"])
def test_own_api_protected_operations_without_a_good_token(live, token):
    """Without our header Schemathesis sends tokens of its own (the document declares the
    bearer scheme) and requests without any."""
    seen = Seen()
    fuzz(_protected(_own(live)), live.url, examples=EXAMPLES // 2,
         headers=_bearer(token) if token else None, path_parameters={"project_id": "toy"},
         checks=[not_a_server_error, seen.check])
    print("schemathesis examples (tagalign's document, no good token):", seen.summary())
    _check_refusals(seen, annif=False)
    assert {op for op, _, _ in seen.statuses} == PROTECTED
    assert {s for _, s, _ in seen.statuses} == ({401, 403} if token is None else {403})
    assert live.logged.bad == []


def test_annif_learn_with_and_without_a_token(live):
    """Annif's document knows no tokens: with one, learn conforms to it (204, or 400 for a
    bad body); without, it answers 401 as problem+json, never a server error."""
    schema = _protected(schemathesis.openapi.from_path(annif_openapi()), "/v1")
    seen = Seen()
    positive = fuzz(schema, f"{live.url}/v1", examples=EXAMPLES, headers=_bearer(live.token),
                    path_parameters={"project_id": "toy"},
                    excluded_checks=[positive_data_acceptance], additional_checks=[seen.check])
    negative = fuzz(schema, f"{live.url}/v1", examples=EXAMPLES, modes=("negative",),
                    headers=_bearer(live.token), path_parameters={"project_id": "toy"},
                    checks=[not_a_server_error, seen.check])
    print("schemathesis examples (Annif's document, token):", positive, negative,
          seen.summary())
    assert list(positive) == ["positive POST /projects/{project_id}/learn"]
    assert {s for _, s, _ in seen.statuses} <= {204, 400} and 204 in {
        s for _, s, _ in seen.statuses}
    refused = Seen()
    fuzz(schema, f"{live.url}/v1", examples=EXAMPLES // 2,
         path_parameters={"project_id": "toy"}, checks=[not_a_server_error, refused.check])
    _check_refusals(refused, annif=True)
    assert {s for _, s, _ in refused.statuses} == {401}
    assert live.logged.bad == []
