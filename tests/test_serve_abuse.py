"""tagalign's own API under abuse (issue 12): Schemathesis on the live OpenAPI document,
and concurrent suggest traffic while /learn writes feedback — real server on localhost."""

from __future__ import annotations

import asyncio

import pytest
import schemathesis
from schemathesis.checks import not_a_server_error, positive_data_acceptance

from loadtest import run_load
from serving import LiveServer, fuzz, toy_app
from tagalign.feedback import FeedbackStore
from tiny_models import tiny_records

EXAMPLES = 30  # per operation and mode


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("abuse")
    with LiveServer(toy_app(root)) as srv:
        srv.db = root / "toy" / "feedback.sqlite"
        yield srv


def test_live_openapi_positive_conformance_and_negative_never_500(live):
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    ops = {f"{r.ok().method.upper()} {r.ok().path}" for r in schema.get_all_operations()}
    assert "POST /tagalign/v1/projects/{project_id}/suggest" in ops
    assert not any(op.split()[1].startswith("/v1/") for op in ops)  # Annif's: its own doc
    # valid inputs: every default check (status codes, content types, response schemas),
    # except "positive data accepted": learn refuses subject ids outside the vocabulary
    # with a 422, which a schema of 205,000 ids does not spell out
    positive = fuzz(schema, live.url, examples=EXAMPLES, path_parameters={"project_id": "toy"},
                    excluded_checks=[positive_data_acceptance])
    # invalid inputs: never a server error, whatever the generator sends
    negative = fuzz(schema, live.url, examples=EXAMPLES, modes=("negative",),
                    path_parameters={"project_id": "toy"}, checks=[not_a_server_error])
    print("schemathesis examples (tagalign's document):", positive, negative)
    assert len(positive) == len(ops) == 15  # the health routes: /health, /live, /ready
    assert sum(positive.values()) >= 3 * EXAMPLES and sum(negative.values()) >= 3 * EXAMPLES


def test_concurrent_suggest_while_learn_writes_feedback(live):
    records = tiny_records(60, seed=3)
    result = asyncio.run(run_load(live.url, "toy", records, suggest_requests=300,
                                  learn_requests=40, clients=25, learn_prefix="loadtest"))
    print(result.summary())
    assert result.errors == []
    assert len(result.suggest_ms) == 300 and len(result.learn_ms) == 40
    assert result.rows_committed == 80  # two accepted subjects per tiny record
    store = FeedbackStore.for_project(live.db.parent)
    assert store.count("toy", record_prefix="loadtest-") == result.rows_committed
    assert {r.id for r in store.confirmed_records("toy")} >= set(result.learned_ids)
    store.close()
