"""Helpers for tests that need a trained project and a real server on localhost."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from tagalign.project import Project
from tagalign.records import read_records

SMALL_HYBRID = {"sources": ["omikuji", "tfidf_knn", "lexical"], "ranker_rounds": 60,
                "holdout_fraction": 0.2}


def train_small_project(path: Path, shared: Path, vocab, n: int = 1500) -> Project:
    recs = list(read_records(shared / "llms4subjects/train.jsonl.gz", vocab=vocab, limit=n))
    project = Project.create(path, vocab, "hybrid", SMALL_HYBRID)
    project.train(recs)
    return project


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
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
