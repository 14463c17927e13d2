"""Several server processes, one ``/metrics`` (prometheus_client's multiprocess mode): two
`tagalign serve` commands share one ``PROMETHEUS_MULTIPROC_DIR`` as a supervisor's workers
would; either one's ``/metrics`` sums both. Their JSON access logs go to stdout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from serving import LOG_FIELDS, MetricSamples, free_port, toy_app
from tagalign.project import model_version
from tagalign.serve import metrics

SUGGEST = "/tagalign/v1/projects/{project_id}/suggest"
MARKER = "zzyzxmarker"  # a word of record text that must never leave the request
HEX_ID = re.compile(r"[0-9a-f]{32}")
BOOT = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import serve_recipe; "
        "from tagalign.cli import app; app()")


class Worker:
    """`tagalign serve PROJECT` in its own process (the toy recipe registered)."""

    def __init__(self, project: Path, env: dict[str, str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # stdout: the access log (not a terminal: --log-format auto is JSON); stderr: the rest
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, str(Path(__file__).parent), "serve", str(project),
             "--port", str(self.port)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.out = self.err = ""

    def wait_up(self) -> None:
        deadline = time.time() + 90
        while True:
            try:
                if httpx.get(f"{self.url}/tagalign/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None and time.time() < deadline, self.stop()
            time.sleep(0.2)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.out, self.err = self.proc.communicate(timeout=20)
        return self.err

    def log(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture()
def workers(tmp_path):
    toy_app(tmp_path)  # trains and saves the toy project
    shared = tmp_path / "prometheus"
    shared.mkdir()
    (shared / "counter_4242.db").write_bytes(b"left by an earlier server")
    (shared / "notes.txt").write_text("not ours")
    assert metrics.prepare_multiprocess_dir(shared) == shared
    assert sorted(p.name for p in shared.iterdir()) == ["notes.txt"]
    env = {**os.environ, metrics.MULTIPROC_ENV: str(shared)}
    pair = [Worker(tmp_path / "toy", env) for _ in range(2)]
    try:
        for w in pair:
            w.wait_up()
        yield pair, shared, tmp_path / "toy"
    finally:
        for w in pair:
            w.stop()


def test_each_workers_metrics_sum_all_workers(workers):
    (a, b), shared, project = workers
    answers = [httpx.post(f"{w.url}/tagalign/v1/projects/toy/suggest",
                          json={"title": f"Pilze {MARKER}", "abstract": text, "limit": 4})
               for w, text in ((a, "fungi"), (a, "rot"), (b, "saga"), (b, "timber"),
                               (b, "wood decay"))]
    assert [r.status_code for r in answers] == [200] * 5
    returned = sum(len(r.json()["results"]) for r in answers)
    assert httpx.post(f"{b.url}/tagalign/v1/projects/nope/suggest",
                      json={"title": "x"}).status_code == 404

    for w in (a, b):  # either worker answers for both
        text = httpx.get(f"{w.url}/metrics").text
        samples = MetricSamples(text)
        assert samples("tagalign_http_requests_total", route=SUGGEST, method="POST",
                       status="200", project="toy") == 5
        assert samples("tagalign_http_request_duration_seconds_count", route=SUGGEST,
                       method="POST", project="toy") == 5
        assert samples("tagalign_suggestions_total", project="toy") == returned
        assert samples("tagalign_records_total", project="toy") == 5
        assert samples("tagalign_errors_total", status="404", route=SUGGEST) == 1
        assert samples("tagalign_model_info", project="toy", **model_version(project)) == 1
        assert samples("tagalign_model_load_seconds", project="toy") > 0
        # the feedback store as the answering worker sees it: one sample, not a sum
        assert samples("tagalign_feedback_store_up", project="toy") == 1
        assert text.count("tagalign_feedback_store_up{") == 1
        assert 0 < time.time() - samples(
            "tagalign_feedback_store_last_reachable_timestamp_seconds", project="toy") < 600
        assert MARKER not in text

    # a worker that ended: its gauges go, its counts stay in the sums
    b.stop()
    assert list(shared.glob(f"gauge_livemax_{b.proc.pid}.db"))
    metrics.worker_exited(b.proc.pid, shared)
    assert not list(shared.glob(f"gauge_livemax_{b.proc.pid}.db"))
    samples = MetricSamples(httpx.get(f"{a.url}/metrics").text)
    assert samples("tagalign_http_requests_total", route=SUGGEST, method="POST",
                   status="200", project="toy") == 5
    assert samples("tagalign_model_info", project="toy", **model_version(project)) == 1

    a.stop()
    for w, n in ((a, 2), (b, 3)):
        lines = w.log()  # every stdout line is one JSON object
        suggests = [x for x in lines if x["route"] == SUGGEST and x["status"] == 200]
        assert len(suggests) == n and all(set(x) == set(LOG_FIELDS) for x in lines)
        assert {x["pid"] for x in lines} == {w.proc.pid}
        assert all(HEX_ID.fullmatch(x["request_id"]) for x in lines)
        assert MARKER not in w.out
    ids = {r.headers["x-request-id"] for r in answers}
    assert ids == {x["request_id"] for w in (a, b) for x in w.log()
                   if x["route"] == SUGGEST and x["status"] == 200}
