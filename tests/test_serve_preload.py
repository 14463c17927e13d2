"""`tagalign serve --workers N` preloaded (the default): the supervisor loads the models
once and forks the workers, which share them; a model swap replaces the workers one at a
time with workers forked from the supervisor's new copy (`tagalign.serve.rollover`).
A real server in a subprocess, real clients."""

from __future__ import annotations

import gc
import shutil
import signal
import time

import httpx
import pytest

from serving import ServeProcess
from tagalign.project import model_version
from test_serve_reload import API, QUERY, T, answers, clients, swap_in


def workers(url: str) -> dict[int, str]:
    return {w["pid"]: w["version"]
            for w in httpx.get(f"{url}{API}", timeout=T).json()["workers"]}


def loads(log: str) -> int:
    """How many times a process loaded the project (each says so once)."""
    return log.count("project tiny: hybrid")


@pytest.mark.parametrize("preload", [True, False])
def test_preloaded_workers_load_the_model_once(tiny_hybrids, tmp_path, preload):
    shutil.copytree(tiny_hybrids[0], tmp_path / "tiny")
    srv = ServeProcess(str(tmp_path / "tiny"), "--workers", "2", "--no-compile-ranker",
                       *([] if preload else ["--no-preload"]), log=tmp_path / "log")
    try:
        srv.wait_ready("tiny", workers=2)
        res = httpx.post(f"{srv.url}{API}/suggest", json=QUERY, timeout=T)
        assert [(r["id"], r["score"]) for r in res.json()["results"]] \
            == answers(tiny_hybrids[0])
        # preloaded: the supervisor's one load; else one per worker
        assert loads(srv.log()) == (1 if preload else 2), srv.log()
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.fixture()
def preloaded(tiny_hybrids, tmp_path):
    shutil.copytree(tiny_hybrids[0], tmp_path / "tiny")
    srv = ServeProcess(str(tmp_path / "tiny"), "--workers", "2", "--no-compile-ranker",
                       log=tmp_path / "log")
    srv.wait_ready("tiny", workers=2)
    yield srv, tmp_path / "tiny"
    assert srv.stop() == 0, srv.log()


def test_a_swap_replaces_the_workers_without_a_failed_request(preloaded, tiny_hybrids):
    srv, folder = preloaded
    old_model, new_model = tiny_hybrids
    old, new = model_version(old_model)["version"], model_version(new_model)["version"]
    before = workers(srv.url)
    assert set(before.values()) == {old}
    expected = {old: answers(old_model), new: answers(new_model)}
    swap_in(new_model, folder)
    with clients(srv.url) as seen:
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 180
        while True:  # every worker is a new one, serving the new model
            now = workers(srv.url)
            if len(now) == 2 and set(now.values()) == {new} and not set(now) & set(before):
                break
            assert time.time() < deadline, srv.log()
            time.sleep(0.1)
    rows = [row for log in seen for row in log]
    assert {status for status, _, _ in rows} == {200}
    assert all(results == expected[v] for _, v, results in rows)
    assert all(log[-1][1] == new for log in seen)
    assert loads(srv.log()) == 2  # at start, and the new model: by the supervisor alone
    for pid in before:  # the old workers stopped
        assert f"in place of {pid}" in srv.log()


def test_a_model_that_fails_to_load_leaves_the_workers_serving(preloaded, tiny_hybrids):
    srv, folder = preloaded
    before = workers(srv.url)
    swap_in(tiny_hybrids[1], folder, break_it=True)
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 120
    while "the new models did not load" not in srv.log():
        assert time.time() < deadline, srv.log()
        time.sleep(0.1)
    assert workers(srv.url) == before  # the same workers, the old model
    res = httpx.post(f"{srv.url}{API}/suggest", json=QUERY, timeout=T)
    assert res.status_code == 200
    assert [(r["id"], r["score"]) for r in res.json()["results"]] == answers(tiny_hybrids[0])


def test_the_supervisor_builds_the_subject_search_index_the_workers_share(tiny_hybrids,
                                                                          tmp_path):
    """Built in each worker, the prefix index walks every subject, writing to their
    reference counts: each worker would copy the vocabulary's pages it shares. `preload`
    builds it before the fork, and a model swap's reload (`refresh_preloaded`) again."""
    from tagalign.serve import factory
    from tagalign.serve.process import ServingProcess
    from tagalign.serve.settings import ServerSettings

    shutil.copytree(tiny_hybrids[0], tmp_path / "tiny")
    settings = ServerSettings(projects=[str(tmp_path / "tiny")], compile_ranker=False)
    process = ServingProcess()  # not this process's own: nothing stays behind
    frozen_at_start = gc.get_freeze_count() > 0
    try:
        factory.preload(settings, process)
        vocab = process.preloaded["tiny"].vocab
        assert getattr(vocab, "_prefix_index", None) is not None
        first = vocab.prefix_index
        subject = next(iter(vocab))
        _, label = next(iter(subject.labels.items()))
        assert subject in [m.subject for m in first.search(label, 5)]
        swap_in(tiny_hybrids[1], tmp_path / "tiny")
        assert factory.refresh_preloaded(settings, process)
        vocab = process.preloaded["tiny"].vocab
        assert getattr(vocab, "_prefix_index", None) is not None
    finally:  # what preload froze thaws; what the session froze before (tests/conftest.py's
        # GND) is frozen again once this test's garbage is gone
        gc.unfreeze()
        if frozen_at_start:
            gc.collect()
            gc.freeze()
