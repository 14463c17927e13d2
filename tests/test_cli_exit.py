"""How the ``tagalign`` command ends (issue 48): a server once stopped gracefully, a
training once its project is saved and a file tagged once its outputs are closed end
without the interpreter's teardown (freeing a 1.5M-heading model object by object took
35-65 s after a server had stopped, ≈ 7 s after a file was tagged), yet what `atexit`
holds still runs; every other command ends as Python ends, objects freed."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from serving import free_port
from tagalign.cli import app
from tagalign.project import Project, Tagger
from tagalign.records import read_records
from tagalign.suggest import SuggestRequest
from tiny_models import tiny_records, tiny_vocab

#: the console script's code, with two marks written to a file: one from `atexit`, one
#: from an object freed only by the interpreter's teardown (a global of ``__main__``)
BOOT = """
import atexit, os, sys
fd = os.open(sys.argv.pop(1), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
atexit.register(os.write, fd, b"atexit\\n")
class FreedAtTeardown:
    def __del__(self, write=os.write, fd=fd):  # builtins may be gone by then
        write(fd, b"teardown\\n")
KEEP = FreedAtTeardown()
from tagalign.cli import main
main()
"""


def tagalign(marks: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BOOT, str(marks), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_stopped_server_ends_without_teardown_and_other_commands_with_it(tmp_path):
    project = tmp_path / "proj"
    Project.create(project, tiny_vocab(), "lexical").train(tiny_records(40))

    other = tagalign(tmp_path / "suggest.marks", "suggest", str(project),
                     "--title", "Geschichte")
    out, _ = other.communicate(timeout=120)
    assert other.returncode == 0, out
    assert (tmp_path / "suggest.marks").read_text().split() == ["atexit", "teardown"]

    port = free_port()
    server = tagalign(tmp_path / "serve.marks", "serve", str(project), "--port", str(port))
    try:
        deadline = time.time() + 120
        while True:
            assert server.poll() is None, server.communicate()[0]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/projects", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0, out
    assert "Traceback" not in out
    assert (tmp_path / "serve.marks").read_text().split() == ["atexit"]


def test_a_training_and_a_tagged_file_end_without_teardown_their_outputs_whole(tmp_path):
    records = tiny_records(40)
    train = tmp_path / "train.jsonl"
    train.write_bytes(b"".join(orjson.dumps(r.to_json()) + b"\n" for r in records))
    tiny_vocab().save(tmp_path / "v")
    project = tmp_path / "proj"
    trained = tagalign(tmp_path / "train.marks", "train", str(project), "--vocab",
                       str(tmp_path / "v"), "--train", str(train), "--recipe", "lexical")
    out, _ = trained.communicate(timeout=120)
    assert trained.returncode == 0, out
    assert (tmp_path / "train.marks").read_text().split() == ["atexit"]
    tagged_one = Tagger(Project.load(project)).tag(records[:1], SuggestRequest())[0]
    assert tagged_one.suggestions, "the saved project tags"

    pred = tmp_path / "pred.jsonl"
    tagged = tagalign(tmp_path / "file.marks", "suggest", str(project), "--input",
                      str(train), "--output", str(pred), "--jobs", "1")
    out, _ = tagged.communicate(timeout=120)
    assert tagged.returncode == 0, out
    assert (tmp_path / "file.marks").read_text().split() == ["atexit"]
    lines = [orjson.loads(line) for line in pred.read_bytes().splitlines()]
    assert [row["id"] for row in lines] == [r.id for r in read_records(train)]
    assert sum(bool(row["subjects"]) for row in lines) >= 30
    assert not (tmp_path / "pred.jsonl.partial").exists()
    # the same lines as the command run in this process, which ends as Python ends
    res = CliRunner().invoke(app, ["suggest", str(project), "--input", str(train),
                                   "--output", str(tmp_path / "same.jsonl"), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert pred.read_bytes() == (tmp_path / "same.jsonl").read_bytes()


@pytest.mark.parametrize("code", [None, 0, 3, "a message"])
def test_main_keeps_a_commands_exit_status_when_it_skips_the_teardown(code, tmp_path,
                                                                      monkeypatch):
    """The status `os._exit` is given is the one `sys.exit` would have ended with."""
    # the module (``tagalign.cli.app`` as an attribute is the Typer app it defines)
    app_module = importlib.import_module("tagalign.cli.app")

    ended: list[int] = []
    monkeypatch.setattr(app_module.os, "_exit", ended.append)
    monkeypatch.setattr(app_module, "app", lambda: sys.exit(code))
    monkeypatch.setattr(app_module, "SKIP_TEARDOWN", app_module.threading.Event())
    app_module.SKIP_TEARDOWN.set()
    monkeypatch.setattr(app_module.atexit, "_run_exitfuncs", lambda: None)
    app_module.main()
    assert ended == [{None: 0, 0: 0, 3: 3, "a message": 1}[code]]
