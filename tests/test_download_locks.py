"""Downloads into one folder at once, and a download while a server reloads it (issue 46,
scenario 6), with real processes: a second download is refused naming the first one's pid
or waits for it (``--wait``); a swap waits for a server loading the folder, and a reload
for a swap under way; the folder always holds one archive's files whole, and the server
one model whole."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from serving import ServeProcess
from tagalign.cli import app
from tagalign.feedback import Decision, FeedbackStore
from tagalign.project import Project, Tagger, model_version
from tagalign.records import Record
from tagalign.shipping import download, swap, upload
from tagalign.suggest import SuggestRequest
from tiny_models import ZEPPELINS

T = 120  # seconds a test waits for a condition (a loaded machine is slow)
API = "/tagalign/v1/projects/tiny"
QUERY = {"title": "Zeppeline und Pilze", "abstract": f"{ZEPPELINS} mushroom rot decay",
         "limit": 5}


@pytest.fixture(scope="module")
def archives(tiny_hybrids, tmp_path_factory) -> dict[str, tuple[str, dict]]:
    """The two tiny hybrids (one vocabulary, different models) as archives: A and B."""
    store = tmp_path_factory.mktemp("store")
    return {name: upload(folder, f"file://{store}/{name}.tar.gz")
            for name, folder in zip("AB", tiny_hybrids, strict=True)}


@pytest.fixture
def target(archives, tmp_path) -> Path:
    """Archive A downloaded into ``models/tiny``, with a feedback store to keep."""
    folder, _ = download(archives["A"][0], tmp_path / "models" / "tiny")
    store = FeedbackStore.for_project(folder)  # a real one: a server opens it
    store.add("tiny", [Decision(Record(id="kept", title="Epos"), ["4015065-3"])])
    store.close()
    return folder


def holds(folder: Path, archives) -> str:
    """Which archive ``folder`` holds, whole: every file it lists with its hash, nothing
    else but the feedback store (which stays)."""
    files = {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in folder.rglob("*") if p.is_file()
             and not p.name.startswith("feedback.sqlite")}
    with sqlite3.connect(folder / "feedback.sqlite") as db:
        assert db.execute("SELECT record_id, subject_id, decision FROM decisions"
                          ).fetchall() == [("kept", "4015065-3", "accept")]
    whole = [name for name, (_, manifest) in archives.items()
             if files == {rel: e["sha256"] for rel, e in manifest["files"].items()}]
    assert whole, f"{folder} holds a mix of two versions"
    return whole[0]


def wait_for(condition, what: str, timeout: float = T) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def cli_download(url: str, into: Path, *args: str, paused: Path | None = None
                 ) -> subprocess.Popen:
    """`tagalign download URL --into INTO --force ARGS` in a subprocess; ``paused``: it
    stops once it holds the folder's lock and has read the manifest, until that file
    exists (so the test knows it overlaps the next one)."""
    cmd = ["-m", "tagalign.cli.main"] if paused is None else ["-c", PAUSED, str(paused)]
    return subprocess.Popen([sys.executable, *cmd, "download", url, "--into", str(into),
                             "--force", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


#: the CLI, with a pause after the download's checks (its lock held); argv[1]: the go file
PAUSED = """
import sys, time
from pathlib import Path
from tagalign.cli import app
from tagalign.feedback import Decision, FeedbackStore
from tagalign.shipping import archive

go, checked = Path(sys.argv.pop(1)), archive._check_space
def check_space(*args):
    checked(*args)
    while not go.exists():
        time.sleep(0.05)
archive._check_space = check_space
app()
"""


# -- two downloads ------------------------------------------------------------------------
def test_a_second_download_is_refused_or_waits_never_mixing(archives, target, tmp_path):
    """Download 1 (archive B) pauses holding the folder's lock. Meanwhile a download
    without --wait is refused naming its pid, and one with --wait waits, then replaces it
    whole once download 1 has finished."""
    go = tmp_path / "go"
    first = cli_download(archives["B"][0], target, paused=go)
    lock = swap.lock_file(target, "download")
    wait_for(lambda: first.poll() is None and lock.exists()
             and lock.read_text().strip() == str(first.pid), "download 1 to take the lock")
    second = cli_download(archives["A"][0], target, "--wait", str(T))
    refused = CliRunner().invoke(app, ["download", archives["A"][0], "--into", str(target),
                                       "--force"])
    assert refused.exit_code == 1 and isinstance(refused.exception, SystemExit)
    assert f"error: another download into {target} is running (pid {first.pid})" in \
        " ".join(refused.output.split()), refused.output
    assert holds(target, archives) == "A"  # untouched while download 1 runs
    wait_for(lambda: "waiting up to" in second.stderr.readline(), "download 2 to wait")
    assert second.poll() is None
    go.touch()
    out, err = first.communicate(timeout=T)
    assert first.returncode == 0, err
    out, err = second.communicate(timeout=T)
    assert second.returncode == 0, err
    assert out.strip() == str(target)
    assert holds(target, archives) == "A"  # download 2 came last, and replaced it whole
    assert not [p for p in target.parent.iterdir()
                if p.name.startswith(".") and not p.name.endswith(".lock")]


# -- a download and a loading server --------------------------------------------------------
def test_a_swap_waits_for_a_server_loading_the_folder(archives, target):
    """A server loading the folder holds the swap lock shared (`swap.read_whole`): the
    verified download waits beside it (``.tiny.incoming``) until the load is done."""
    loading, loaded = threading.Event(), threading.Event()

    def load() -> None:
        swap.read_whole([target], lambda: (loading.set(), loaded.wait(T)))

    reader = threading.Thread(target=load)
    reader.start()
    loading.wait(T)
    fetch = threading.Thread(target=download, args=(archives["B"][0], target),
                             kwargs={"force": True})
    fetch.start()
    wait_for(lambda: swap.incoming(target).exists(), "the download to verify")
    time.sleep(0.5)  # the swap would be done by now without the lock
    assert fetch.is_alive() and holds(target, archives) == "A"
    loaded.set()
    fetch.join(T)
    reader.join(T)
    assert holds(target, archives) == "B"


def _answers(folder: Path) -> list[tuple[str, float]]:
    rec = Record(id="q", title=QUERY["title"], abstract=QUERY["abstract"])
    tagged = Tagger(Project.load(folder)).tag([rec], SuggestRequest(limit=QUERY["limit"]))[0]
    return [(s.id, round(float(s.score), 6)) for s in tagged.suggestions]


def _served(url: str) -> tuple[list[tuple[str, float]], str]:
    res = httpx.post(f"{url}{API}/suggest", json=QUERY, timeout=T)
    assert res.status_code == 200, res.text
    return [(r["id"], r["score"]) for r in res.json()["results"]], res.headers["x-model-version"]


def _reload(url: str) -> httpx.Response:
    return httpx.post(f"{url}{API}/reload", timeout=T,
                      headers={"Content-Type": "application/json"})


def test_a_reload_during_a_swap_waits_and_serves_the_new_model_whole(
        archives, target, tiny_hybrids, tmp_path, monkeypatch):
    """`tagalign serve` reloads while a download is between "old project aside" and "new
    project in" (no folder at all for a moment): the reload waits for the swap and serves
    the new model; the old one answers meanwhile. Then downloads and reloads race: every
    answer is one model's, whole."""
    expected = {model_version(m)["version"]: _answers(m) for m in tiny_hybrids}
    va, vb = (model_version(m)["version"] for m in tiny_hybrids)
    srv = ServeProcess(str(target), "--no-compile-ranker", log=tmp_path / "log")
    try:
        srv.wait_ready("tiny", timeout=T)
        aside, go_on = threading.Event(), threading.Event()
        real = swap._rename_in

        def paused(src: Path, dst: Path) -> None:
            aside.set()  # step 2 done: the old project is aside, the new one not yet in
            go_on.wait(T)
            real(src, dst)

        monkeypatch.setattr(swap, "_rename_in", paused)
        fetch = threading.Thread(target=download, args=(archives["B"][0], target),
                                 kwargs={"force": True})
        fetch.start()
        aside.wait(T)
        assert not target.exists()
        answer: list[httpx.Response] = []
        reloading = threading.Thread(target=lambda: answer.append(_reload(srv.url)))
        reloading.start()
        time.sleep(1.0)  # a reload without the lock answers 409 at once: no model here
        assert reloading.is_alive() and not answer
        assert _served(srv.url) == (expected[va], va)  # the old model serves meanwhile
        go_on.set()
        fetch.join(T)
        reloading.join(T)
        monkeypatch.setattr(swap, "_rename_in", real)
        assert answer[0].status_code == 200, answer[0].text
        assert answer[0].json()["status"] == "reloaded"
        assert _served(srv.url) == (expected[vb], vb)

        for name in "AB":  # downloads and reloads at once
            fetch = threading.Thread(target=download, args=(archives[name][0], target),
                                     kwargs={"force": True})
            fetch.start()
            while fetch.is_alive():
                assert _reload(srv.url).status_code == 200
                results, version = _served(srv.url)
                assert results == expected[version]
            fetch.join()
        assert _reload(srv.url).status_code == 200
        assert _served(srv.url) == (expected[vb], vb)
        assert "reload refused" not in srv.log()
    finally:
        srv.stop()
