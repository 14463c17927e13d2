"""`tagalign vocab update` on a project a real server serves: the server keeps answering
while the folder is updated, then its reload brings the update in (a new model version):
the new heading is suggested, the redirected one never again, and the project's
description shows the vocabulary state. Slow tier (a server subprocess)."""

from __future__ import annotations

import shutil
import threading

import httpx
import pytest

from marc_authority import write_xml
from serving import ServeProcess
from tagalign.shipping.vocab_update import update_vocabulary
from test_vocab_update import HOLZSCHUTZ, PILZE, ZEPPELIN, week

pytestmark = pytest.mark.slow
API = "/tagalign/v1/projects/tiny"
T = 60
QUERIES = [{"title": "Zeppelin", "abstract": "hangar", "language": "de", "limit": 8},
           {"title": "Pilze", "abstract": "fungi mushroom rot decay mould", "language": "en",
            "limit": 8}]


def ids(url: str, query: dict) -> list[str]:
    res = httpx.post(f"{url}{API}/suggest", json=query, timeout=T)
    assert res.status_code == 200, res.text
    return [r["id"] for r in res.json()["results"]]


def test_a_served_project_picks_the_update_up_at_its_reload(tiny_hybrid, tmp_path):
    folder = tmp_path / "tiny"
    shutil.copytree(tiny_hybrid, folder)
    srv = ServeProcess(str(folder), "--no-compile-ranker", log=tmp_path / "log")
    try:
        before = srv.wait_ready("tiny")
        assert before["vocabulary_state"] is None
        assert ZEPPELIN not in ids(srv.url, QUERIES[0]) and PILZE in ids(srv.url, QUERIES[1])
        statuses: list[int] = []
        stop = threading.Event()

        def client() -> None:
            with httpx.Client(base_url=srv.url, timeout=T) as http:
                while not stop.is_set():
                    statuses.append(http.post(f"{API}/suggest", json=QUERIES[1]).status_code)

        thread = threading.Thread(target=client)
        thread.start()
        try:
            update_vocabulary(folder, [write_xml(tmp_path / "week_20240702.mrc.xml", week())])
            res = httpx.post(f"{srv.url}{API}/reload", timeout=120,
                             headers={"Content-Type": "application/json"})
            assert res.status_code == 200 and res.json()["status"] == "reloaded", res.text
        finally:
            stop.set()
            thread.join(60)
        assert statuses and set(statuses) == {200}
        info = httpx.get(f"{srv.url}{API}", timeout=T).json()
        assert info["model_version"]["version"] != before["model_version"]["version"]
        assert info["vocabulary_state"]["counts"]["added"] == 1
        assert info["vocabulary_size"] == 6  # 9 headings, 3 retired
        assert ZEPPELIN in ids(srv.url, QUERIES[0])
        fungi = ids(srv.url, QUERIES[1])
        assert PILZE not in fungi and HOLZSCHUTZ in fungi
    finally:
        srv.stop()
