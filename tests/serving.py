"""Helpers for tests that need a trained project and a real server on localhost."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from tagalign.project import Project, ServingSettings
from tagalign.records import read_records
from tiny_models import TINY_HYBRID

ROOT = Path(__file__).resolve().parents[1]
ANNIF_VERSION = "1.4.3"
ANNIF_WHEEL_DIR = ROOT / ".whl"  # git-ignored; `make test` fills it
ANNIF_OPENAPI = ANNIF_WHEEL_DIR / f"annif-{ANNIF_VERSION}" / "annif" / "openapi" / "annif.yaml"

#: the fields of a JSON access-log line (`tagalign.serve.accesslog`)
LOG_FIELDS = ("ts", "request_id", "method", "route", "project", "status", "latency_ms",
              "records", "pid")

def train_small_project(path: Path, shared: Path, vocab, n: int = 1500) -> Project:
    """A `TINY_HYBRID` trained on the first ``n`` records of the shared training file."""
    recs = list(read_records(shared / "llms4subjects/train.jsonl.gz", vocab=vocab, limit=n))
    project = Project.create(path, vocab, "hybrid", TINY_HYBRID)
    project.train(recs)
    return project


def copy_project(trained: Path, path: Path) -> Project:
    """A copy of the project folder ``trained`` at ``path``, loaded (one of this test's own,
    to learn into)."""
    shutil.copytree(trained, path)
    return Project.load(path)


@contextmanager
def logged(name: str, level: int = logging.INFO) -> Iterator[list[str]]:
    """The messages logger ``name`` logs at ``level`` or above while the block runs."""
    logger, seen = logging.getLogger(name), []
    handler = logging.Handler(level)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """uvicorn serving an ASGI app in a background thread on a free localhost port."""

    def __init__(self, app):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.url}/tagalign/v1/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class MetricSamples:
    """``/metrics`` text parsed by prometheus_client's own parser: a sample's value by
    name and labels (0 for a sample not there)."""

    def __init__(self, text: str):
        self.text = text
        self.values = {(s.name, frozenset(s.labels.items())): s.value
                       for family in text_string_to_metric_families(text)
                       for s in family.samples}

    def __call__(self, name: str, **labels: str) -> float:
        return self.values.get((name, frozenset(labels.items())), 0.0)

    def label_values(self) -> set[str]:
        return {v for _, labels in self.values for _, v in labels}


class ServeProcess:
    """`tagalign serve ARGS…` in a subprocess on a free localhost port (its output in
    ``log``); `wait_ready` polls until the given number of workers answer."""

    def __init__(self, *args: str, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        with open(log, "wb") as out:  # a file: a full pipe would stall the server
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tagalign.cli.main", "serve", *args, "--port",
                 str(self.port)], stdout=out, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, project: str, workers: int = 1, timeout: float = 300) -> dict:
        """GET the project until ``workers`` workers report it (each writes its state once
        its app exists); returns the last answer."""
        deadline = time.time() + timeout
        while True:
            assert self.proc.poll() is None, self.log()
            try:
                res = httpx.get(f"{self.url}/tagalign/v1/projects/{project}", timeout=5)
                if res.status_code == 200 and len(res.json()["workers"]) == workers:
                    return res.json()
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, f"server not ready:\n{self.log()}"
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout)


class HeldRequest:
    """A JSON POST in flight on the server, its body held back: sent up to its headers with
    ``Expect: 100-continue`` (h11 as the client); once the server asks for the body
    (``100 Continue``: the app is reading it), a worker has the request. `finish` sends the
    body and returns the answer's status, headers and body."""

    def __init__(self, port: int, path: str, body: dict):
        import h11

        self.h11 = h11
        self.body = json.dumps(body).encode()
        self.conn = h11.Connection(our_role=h11.CLIENT)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.sendall(self.conn.send(h11.Request(method="POST", target=path, headers=[
            ("Host", f"127.0.0.1:{port}"), ("Content-Type", "application/json"),
            ("Content-Length", str(len(self.body))), ("Expect", "100-continue")])))
        event = self._next()
        assert isinstance(event, h11.InformationalResponse) and event.status_code == 100, event

    def _next(self):
        while True:
            event = self.conn.next_event()
            if event is not self.h11.NEED_DATA:
                return event
            self.conn.receive_data(self.sock.recv(65536))

    def finish(self) -> tuple[int, dict[str, str], bytes]:
        h11 = self.h11
        self.sock.sendall(self.conn.send(h11.Data(data=self.body))
                          + self.conn.send(h11.EndOfMessage()))
        response = self._next()
        assert isinstance(response, h11.Response), response
        data = b""
        while not isinstance(event := self._next(), h11.EndOfMessage):
            data += event.data
        self.sock.close()
        return (response.status_code, {k.decode(): v.decode() for k, v in response.headers},
                data)


def refused(port: int) -> bool:
    """No server accepts connections on the port any more."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def annif_openapi() -> Path:
    """Annif's own OpenAPI document, from the annif wheel on PyPI (never committed here).

    `make test` downloads the wheel into .whl/ and extracts the document; run alone, this
    does the same (pip needs PyPI). Raises when neither works, so CI cannot pass silently.
    """
    if not ANNIF_OPENAPI.exists():
        wheel = ANNIF_WHEEL_DIR / f"annif-{ANNIF_VERSION}-py3-none-any.whl"
        if not wheel.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            f"annif=={ANNIF_VERSION}", "-d", str(ANNIF_WHEEL_DIR)], check=True)
        with zipfile.ZipFile(wheel) as z:
            z.extract("annif/openapi/annif.yaml", ANNIF_OPENAPI.parents[2])
    return ANNIF_OPENAPI


def toy_app(root: Path, online: bool = True, allow_learn: bool = True,
            max_body: int = 1_000_000):
    """The serve tests' toy project (tiny vocabulary, `test-overlap` recipe) as an app;
    learning allowed (the tests learn through it) and a 1 MB body limit unless told."""
    import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
    from tagalign.feedback import FeedbackStore
    from tagalign.serve.app import create_app
    from tiny_models import tiny_records, tiny_vocab

    train = tiny_records(40)
    project = Project.create(root / "toy", tiny_vocab(), "test-overlap", {"online": online})
    project.train(train)
    project = project.with_serving(ServingSettings(allow_learn=allow_learn))
    return create_app({"toy": project}, FeedbackStore.for_project(root / "toy"),
                      {r.id: r for r in train}, max_body=max_body)


def fuzz(schema, base_url: str, *, examples: int, modes=("positive",),
         path_parameters: dict[str, str] | None = None, checks=None,
         excluded_checks=(), additional_checks=(),
         headers: dict[str, str] | None = None) -> dict[str, int]:
    """Schemathesis cases for every operation of ``schema`` against ``base_url``.

    Driven through Hypothesis directly (`as_strategy`) because the server is a pytest
    fixture; derandomized, so a run never fails by chance. Returns examples run per
    ``"MODE METHOD PATH"``; any failed check raises with Schemathesis' report.
    ``headers`` go with every request (an API token: ``Authorization: Bearer …``).
    """
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    counts: dict[str, int] = {}

    def _runner(strategy, key: str):
        @given(case=strategy)
        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            counts[key] += 1
            case.call_and_validate(base_url=base_url, checks=checks, headers=headers,
                                   excluded_checks=list(excluded_checks),
                                   additional_checks=list(additional_checks), timeout=30)
        return run

    for result in schema.get_all_operations():
        op = result.ok()
        params = {k: v for k, v in (path_parameters or {}).items() if f"{{{k}}}" in op.path}
        for mode in modes:
            key = f"{mode} {op.method.upper()} {op.path}"
            counts[key] = 0
            strategy = op.as_strategy(GenerationMode(mode), path_parameters=params or None)
            try:
                _runner(strategy, key)()
            except Unsatisfiable:
                if mode == "positive":
                    raise
                # an operation without inputs (or only the fixed project id) has nothing
                # to make invalid; it counts 0 negative examples
    return counts
