"""Metrics, request ids and the access log of a real server on localhost
(`tagalign.serve.observe`): ``/metrics`` read with prometheus_client's own parser after
known requests; no record text in a label or a log line."""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import logging
import os
import re
import time
from collections.abc import Sequence

import httpx
import pytest
from typer.testing import CliRunner

from serve_recipe import OverlapRecipe
from serving import LOG_FIELDS, LiveServer, MetricSamples
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings, model_version
from tagalign.recipes import register_recipe
from tagalign.records import Record
from tagalign.serve import accesslog
from tagalign.serve.app import create_app
from tagalign.suggest import Quality, SuggestRequest, Tagged
from tiny_models import tiny_records, tiny_vocab

API = "/tagalign/v1"
SUGGEST = API + "/projects/{project_id}/suggest"
BATCH = API + "/projects/{project_id}/suggest-batch"
LEARN = API + "/projects/{project_id}/learn"
PILZE, EPOS = "4046076-9", "4015065-3"
MARKER = "zzyzxmarker"  # a word of record text that must never leave the request
HEX_ID = re.compile(r"[0-9a-f]{32}")  # a request id the server made


@register_recipe
class QualityOverlap(OverlapRecipe):
    """The toy recipe with a quality estimate: recall 0.25 per subject returned (at most
    1), precision 0.5."""

    name = "test-overlap-quality"

    def _answer(self, records: Sequence[Record], request: SuggestRequest) -> list[Tagged]:
        answers = super()._answer(records, request)
        for t in answers:
            t.quality = Quality(min(1.0, 0.25 * len(t.suggestions)), 0.5) \
                if request.quality else None
        return answers


@register_recipe
class BrokenRecipe(OverlapRecipe):
    """Trains, then fails every suggest with an error no handler knows: a 500."""

    name = "test-broken"

    def _suggest(self, records, limit):
        raise RuntimeError("the model fell over")


def scrape(url: str) -> MetricSamples:
    res = httpx.get(f"{url}/metrics")
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/plain")
    return MetricSamples(res.text)


def _reset_access_log() -> None:
    for handler in list(accesslog.log.handlers):
        accesslog.log.removeHandler(handler)
    accesslog.log.setLevel(logging.NOTSET)
    accesslog.log.propagate = True


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics")
    train = tiny_records(40)
    Project.create(root / "toy", tiny_vocab(), "test-overlap-quality").train(train)
    Project.create(root / "frozen", tiny_vocab(), "test-overlap", {"online": False}
                   ).train(train)
    Project.create(root / "closed", tiny_vocab(), "test-overlap").train(train)
    Project.create(root / "broken", tiny_vocab(), "test-broken").train(train)
    projects = {name: Project.load(root / name) for name in ("toy", "frozen", "closed",
                                                             "broken")}
    for name in ("toy", "frozen"):
        projects[name] = projects[name].with_serving(ServingSettings(allow_learn=True))
    app = create_app(projects, FeedbackStore.for_project(root / "toy"),
                     {r.id: r for r in train}, max_body=100_000)
    stream = io.StringIO()
    assert accesslog.configure("json", stream) == "json"
    try:
        with LiveServer(app) as srv:
            srv.app, srv.root, srv.projects, srv.log = app, root, projects, stream
            yield srv
    finally:
        _reset_access_log()


def log_line(live, request_id: str) -> dict:
    """The access-log line of a request (written before its last bytes are sent)."""
    lines = [json.loads(x) for x in live.log.getvalue().splitlines()]
    found = [x for x in lines if x["request_id"] == request_id]
    assert len(found) == 1, found
    return found[0]


def test_suggests_count_requests_subjects_records_latency_and_quality(live):
    before = scrape(live.url)
    single = [httpx.post(f"{live.url}{API}/projects/toy/suggest",
                         json={"title": title, "abstract": abstract, "limit": 3})
              for title, abstract in (("Pilze", "fungi rot"), ("Epos", "saga verse"),
                                      ("Holzschutz", "timber coating beam"))]
    assert [r.status_code for r in single] == [200, 200, 200]
    batch = httpx.post(f"{live.url}{API}/projects/toy/suggest-batch", json={"records": [
        {"title": t} for t in ("Pilze", "Philosophie", "Zukunft", "nothing known")]})
    assert batch.status_code == 200
    annif = httpx.post(f"{live.url}/v1/projects/toy/suggest", data={"text": "Pilze\nfungi"})
    assert annif.status_code == 200
    after = scrape(live.url)

    def delta(name: str, **labels: str) -> float:
        return after(name, **labels) - before(name, **labels)

    ok = {"method": "POST", "project": "toy"}
    assert delta("tagalign_http_requests_total", route=SUGGEST, status="200", **ok) == 3
    assert delta("tagalign_http_requests_total", route=BATCH, status="200", **ok) == 1
    assert delta("tagalign_http_requests_total", route="/v1/projects/{project_id}/suggest",
                 status="200", **ok) == 1
    assert delta("tagalign_http_request_duration_seconds_count", route=SUGGEST, **ok) == 3
    assert delta("tagalign_http_request_duration_seconds_sum", route=SUGGEST, **ok) > 0
    assert delta("tagalign_http_request_duration_seconds_bucket", route=SUGGEST, le="+Inf",
                 **ok) == 3
    own = [r.json()["results"] for r in single] + batch.json()["results"]
    returned = sum(map(len, own)) + len(annif.json()["results"])
    assert returned > 5
    assert delta("tagalign_suggestions_total", project="toy") == returned
    assert delta("tagalign_records_total", project="toy") == 3 + 4 + 1
    # the own API estimates quality (7 records), Annif's does not ask for it
    recalls = [r.json()["quality"]["recall"] for r in single] + [
        q["recall"] for q in batch.json()["qualities"]]
    assert recalls == [min(1.0, 0.25 * len(rows)) for rows in own]
    assert delta("tagalign_quality_recall_estimate_count", project="toy") == 7
    assert delta("tagalign_quality_recall_estimate_sum", project="toy") == pytest.approx(
        sum(recalls))
    assert delta("tagalign_quality_recall_estimate_bucket", project="toy", le="0.5") == sum(
        x <= 0.5 for x in recalls)
    assert delta("tagalign_quality_precision_estimate_sum", project="toy") == 3.5
    rid = batch.headers["x-request-id"]
    assert log_line(live, rid)["records"] == 4
    assert log_line(live, single[0].headers["x-request-id"])["records"] == 1


def test_errors_count_by_status_and_unknown_ids_add_no_series(live):
    before = scrape(live.url)
    answers = [httpx.post(f"{live.url}{API}/projects/made-up-{i}/suggest",
                          json={"title": "x"}) for i in range(3)]
    answers += [
        httpx.post(f"{live.url}{API}/projects/toy/suggest", json={"abstract": "no title"}),
        httpx.post(f"{live.url}{API}/projects/toy/suggest", json={"title": "x"},
                   headers={"host": "rebound.example"}),
        httpx.post(f"{live.url}{API}/projects/toy/suggest", content=b"title=x",
                   headers={"content-type": "text/plain"}),
        httpx.post(f"{live.url}{API}/projects/toy/suggest", content=b"{}" * 60_000,
                   headers={"content-type": "application/json"}),
        httpx.get(f"{live.url}/no/such/page"),
        httpx.get(f"{live.url}{API}/projects/toy"),
    ]
    assert [r.status_code for r in answers] == [404, 404, 404, 422, 421, 415, 413, 404, 200]
    assert all(HEX_ID.fullmatch(r.headers["x-request-id"]) for r in answers)
    after = scrape(live.url)

    def delta(name: str, **labels: str) -> float:
        return after(name, **labels) - before(name, **labels)

    assert delta("tagalign_http_requests_total", route=SUGGEST, method="POST", status="404",
                 project="") == 3
    assert delta("tagalign_errors_total", status="404", route=SUGGEST) == 3
    assert delta("tagalign_errors_total", status="422", route=SUGGEST) == 1
    # refused before routing (Host, Content-Type, declared size) or no route at all
    for status in ("421", "415", "413", "404"):
        assert delta("tagalign_errors_total", status=status, route="unrouted") == 1, status
    assert delta("tagalign_http_requests_total", route=API + "/projects/{project_id}",
                 method="GET", status="200", project="toy") == 1
    assert not any("made-up" in v for v in after.label_values())
    assert log_line(live, answers[0].headers["x-request-id"])["project"] == ""


def test_learn_calls_count_by_outcome(live):
    def learn(pid: str, subjects: list[str]) -> int:
        return httpx.post(f"{live.url}{API}/projects/{pid}/learn", json={"records": [
            {"id": f"l-{pid}-{i}", "title": "Pilze im Fachwerk", "abstract": "fungi",
             "language": "de", "subjects": subjects} for i in range(2)]}).status_code

    before = scrape(live.url)
    assert [learn("toy", [PILZE]), learn("frozen", [PILZE]), learn("closed", [PILZE]),
            learn("toy", ["0000000-0"])] == [200, 200, 403, 422]
    res = httpx.post(f"{live.url}/v1/projects/toy/learn", json=[
        {"text": "Epos\nsaga", "subjects": [{"uri": f"https://d-nb.info/gnd/{EPOS}"}]}])
    assert res.status_code == 204
    after = scrape(live.url)
    for project, outcome, n in (("toy", "learned", 2), ("frozen", "stored", 1),
                                ("closed", "refused", 1), ("toy", "invalid", 1)):
        assert after("tagalign_learn_total", project=project, outcome=outcome) - before(
            "tagalign_learn_total", project=project, outcome=outcome) == n, outcome
    assert log_line(live, res.headers["x-request-id"])["records"] == 1
    assert after("tagalign_http_requests_total", route=LEARN, method="POST", status="403",
                 project="closed") == 1


def test_model_version_load_time_and_reloads(live):
    manifest = (live.root / "toy" / "model" / "recipe.json").read_bytes()
    version = model_version(live.root / "toy")
    assert version == {"version": hashlib.sha256(manifest).hexdigest()[:12],
                       "trained_at": json.loads(manifest)["saved"]}
    assert model_version(live.projects["toy"]) == version
    assert model_version(live.root / "nothing-here") == {"version": None, "trained_at": None}
    samples = scrape(live.url)
    assert samples("tagalign_model_info", project="toy", **version) == 1
    seconds = live.projects["toy"].load_seconds
    assert seconds > 0 and samples("tagalign_model_load_seconds", project="toy") == seconds
    assert samples("tagalign_model_reload_total", project="toy", outcome="ok") == 0

    live.app.state.metrics.model_loaded("toy", 1.5, "0123456789ab", "2031-01-01T00:00:00+00:00")
    live.app.state.metrics.model_load_failed("toy")
    samples = scrape(live.url)
    assert samples("tagalign_model_info", project="toy", **version) == 0
    assert samples("tagalign_model_info", project="toy", version="0123456789ab",
                   trained_at="2031-01-01T00:00:00+00:00") == 1
    assert samples("tagalign_model_load_seconds", project="toy") == 1.5
    assert samples("tagalign_model_reload_total", project="toy", outcome="ok") == 1
    assert samples("tagalign_model_reload_total", project="toy", outcome="failed") == 1


def test_no_record_text_in_metrics_or_access_log(live):
    text = {"title": f"Pilze {MARKER}", "abstract": f"fungi {MARKER} rot", "language": "de"}
    calls = [
        httpx.post(f"{live.url}{API}/projects/toy/suggest", json=text),
        httpx.post(f"{live.url}{API}/projects/toy/suggest-batch", json={"records": [text]}),
        httpx.post(f"{live.url}{API}/projects/toy/learn", json={"records": [
            {"id": MARKER, **text, "subjects": [PILZE]}]}),
        httpx.post(f"{live.url}/v1/projects/toy/suggest", data={"text": f"{MARKER}\nfungi"}),
        httpx.get(f"{live.url}{API}/projects/toy/subjects", params={"prefix": MARKER}),
        httpx.get(f"{live.url}{API}/records/{MARKER}"),
        httpx.post(f"{live.url}{API}/projects/{MARKER}/suggest", json=text),
    ]
    assert [r.status_code for r in calls] == [200, 200, 200, 200, 200, 404, 404]
    metrics = httpx.get(f"{live.url}/metrics").text
    assert "Pilze" not in metrics and MARKER not in metrics.lower()
    assert MARKER not in live.log.getvalue().lower()
    lines = [log_line(live, r.headers["x-request-id"]) for r in calls]
    assert [x["route"] for x in lines[-2:]] == [API + "/records/{record_id}", SUGGEST]


def test_request_ids_are_kept_made_or_replaced(live):
    url = f"{live.url}{API}/health"
    assert httpx.get(url, headers={"X-Request-ID": "req-42.a:b"}).headers[
        "x-request-id"] == "req-42.a:b"
    for bad in ("two words", "x" * 129, "naïve".encode(), ""):
        made = httpx.get(url, headers={"X-Request-ID": bad}).headers["x-request-id"]
        assert HEX_ID.fullmatch(made), bad
    ids = {httpx.get(url).headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3 and all(HEX_ID.fullmatch(i) for i in ids)
    line = log_line(live, "req-42.a:b")
    assert line["route"] == API + "/health" and line["status"] == 200


def test_an_unhandled_error_is_a_500_with_an_id_counted_and_logged(live):
    before = scrape(live.url)("tagalign_errors_total", status="500", route=SUGGEST)
    res = httpx.post(f"{live.url}{API}/projects/broken/suggest", json={"title": "Pilze"},
                     headers={"X-Request-ID": "broken-1"})
    assert res.status_code == 500 and res.headers["x-request-id"] == "broken-1"
    assert res.text == "Internal Server Error"
    assert scrape(live.url)("tagalign_errors_total", status="500", route=SUGGEST) == before + 1
    line = log_line(live, "broken-1")
    assert line["status"] == 500 and line["project"] == "broken"


def test_access_log_lines_hold_exactly_the_fields(live):
    res = httpx.post(f"{live.url}{API}/projects/toy/suggest", json={"title": "Pilze"},
                     headers={"X-Request-ID": "fields-1"})
    line = log_line(live, "fields-1")
    assert set(line) == set(LOG_FIELDS)
    assert line | {"ts": None, "latency_ms": None} == {
        "ts": None, "request_id": "fields-1", "method": "POST", "route": SUGGEST,
        "project": "toy", "status": 200, "latency_ms": None, "records": 1,
        "pid": os.getpid()}
    assert res.status_code == 200 and line["latency_ms"] > 0
    ts = _dt.datetime.fromisoformat(line["ts"])
    assert abs(ts.timestamp() - time.time()) < 600  # today's, in UTC ("Z")


def test_auto_log_format_is_text_on_a_terminal_and_json_otherwise():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def one_request() -> None:
        accesslog.request(request_id="t-1", method="GET", route="/v1/", project="",
                          status=200, seconds=0.0123, records=None)

    parent = logging.getLogger("tagalign")
    saved = parent.handlers[:]
    try:
        assert accesslog.configure("auto", io.StringIO()) == "json"
        parent.handlers = []  # used as a library: text goes to the stream itself
        alone = Terminal()
        assert accesslog.configure("auto", alone) == "text"
        one_request()
        console = io.StringIO()  # the CLI's console: text joins its other lines
        parent.addHandler(logging.StreamHandler(console))
        assert accesslog.configure("text", Terminal()) == "text"
        one_request()
        with pytest.raises(ValueError):
            accesslog.configure("yaml")  # type: ignore[arg-type]
    finally:
        parent.handlers = saved
        _reset_access_log()
    assert alone.getvalue().endswith(" 200 GET /v1/ 12.3 ms id=t-1\n")
    assert console.getvalue() == "200 GET /v1/ 12.3 ms id=t-1\n"


def test_metrics_off_is_404_and_the_cli_flag_turns_them_off(tmp_path, monkeypatch):
    from tagalign.cli import app as cli
    from tagalign.serve import server

    Project.create(tmp_path / "toy", tiny_vocab(), "test-overlap").train(tiny_records(20))
    built = []
    monkeypatch.setattr(server, "run_server", lambda app_, *a: built.append(app_))
    runner = CliRunner()
    try:
        for flag in ("--no-metrics", "--metrics"):
            res = runner.invoke(cli, ["serve", str(tmp_path / "toy"), flag,
                                      "--log-format", "text"])
            assert res.exit_code == 0, res.output
    finally:
        _reset_access_log()
    for app_, status in zip(built, (404, 200), strict=True):
        with LiveServer(app_) as srv:
            res = httpx.get(f"{srv.url}/metrics")
            assert res.status_code == status and HEX_ID.fullmatch(res.headers["x-request-id"])
            assert "/metrics" not in httpx.get(f"{srv.url}/openapi.json").json()["paths"]
