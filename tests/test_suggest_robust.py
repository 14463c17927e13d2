"""`tagalign suggest` never loses a run (issue 12): the three cases of the issue from the
CLI, streaming to OUT.partial, --resume after an interrupted or killed run, exit status,
degenerate records in the core."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from suggesting import suggestions
from tagalign.cli import app
from tagalign.project import Project, Tagger
from tagalign.records import EMPTY_WARNING, MAX_TEXT_CHARS, Record
from tagalign.suggest import SuggestRequest
from tiny_models import tiny_records, tiny_vocab

runner = CliRunner()


@pytest.fixture(scope="module")
def proj(tmp_path_factory) -> Path:
    """A lexical project on the tiny vocabulary: trains instantly, deterministic."""
    root = tmp_path_factory.mktemp("robust")
    project = Project.create(root / "proj", tiny_vocab(), "lexical")
    project.train(tiny_records(10))
    return root / "proj"


def _lines(recs: list[Record]) -> list[bytes]:
    return [json.dumps(r.to_json()).encode() for r in recs]


def _suggest(proj: Path, src: Path, out: Path, *extra: str):
    return runner.invoke(app, ["suggest", str(proj), "--input", str(src), "--output", str(out),
                               "--limit", "5", *extra])


def _ids(path: Path) -> list[str]:
    opener = gzip.open if ".gz" in path.suffixes else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line)["id"] for line in fh]


def test_mixed_file_keeps_good_records_and_names_bad_lines(proj, tmp_path):
    good = _lines(tiny_records(3, seed=5))
    src = tmp_path / "mixed.jsonl"
    src.write_bytes(b"\n".join([good[0], b'{"id": "x", "title": "Epen', good[1]
                                .replace(b'"title": "', b'"title": "\xff'), good[2]]) + b"\n")
    out = tmp_path / "out.jsonl"
    res = _suggest(proj, src, out)
    assert res.exit_code == 0, res.output
    assert _ids(out) == ["r0", "r2"] and not (tmp_path / "out.jsonl.partial").exists()
    assert f"{src}:2: " in res.output and f"{src}:3: not valid UTF-8 (byte 0xff" in res.output
    assert "4 records read" not in res.output  # read counts good records only
    assert "2 records read: 2 tagged (0 empty: no suggestions), 2 malformed skipped" in res.output

    strict = _suggest(proj, src, tmp_path / "strict.jsonl", "--strict")
    assert strict.exit_code == 1 and f"{src}:2: " in strict.output
    assert "--resume" in strict.output
    assert _ids(tmp_path / "strict.jsonl.partial") == ["r0"]  # finished before the bad line


def test_cut_off_gzip_keeps_the_records_before_the_cut(proj, tmp_path):
    recs = tiny_records(400, seed=2)
    data = gzip.compress(b"\n".join(_lines(recs)) + b"\n")
    src = tmp_path / "records.jsonl.gz"
    src.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out.jsonl.gz"
    res = _suggest(proj, src, out, "--batch-size", "64")
    assert res.exit_code == 0, res.output
    ids = _ids(out)
    assert 50 < len(ids) < 400 and ids == [r.id for r in recs[: len(ids)]]
    assert f"{src}: compressed data ends early after {len(ids)} records" in res.output
    assert f"{len(ids)} records read: {len(ids)} tagged" in res.output


def test_empty_record_gets_no_suggestions_and_is_counted(proj, tmp_path):
    recs = tiny_records(3, seed=7)
    recs[1].title, recs[1].abstract = "  ", ""
    recs[2].language = "tlh"  # an unknown language code: detected from the text instead
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(_lines(recs)) + b"\n")
    out = tmp_path / "out.jsonl"
    res = _suggest(proj, src, out)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(r["subjects"]) > 0 for r in rows] == [True, False, True]
    assert "3 records read: 3 tagged (1 empty: no suggestions)" in res.output
    assert f"record r1: {EMPTY_WARNING}" in res.output


def test_core_truncates_huge_records_and_says_so(proj):
    project = Project.load(proj)
    rec = tiny_records(1, seed=3)[0]
    huge = Record(id="big", title=rec.title, abstract=rec.abstract + " x" * 10_000_000,
                  language=rec.language)  # a 20 MB abstract
    tagger = Tagger(project)
    cut, small = tagger.tag([huge, rec], SuggestRequest(limit=5, quality=False))
    n = len(huge.title) + len(huge.abstract)
    assert cut.warning == f"text truncated to {MAX_TEXT_CHARS:,} of {n:,} characters"
    assert small.warning is None
    assert [s.id for s in cut.suggestions] == [s.id for s in small.suggestions]
    empty, = tagger.tag([Record(id="e", title="")])
    assert empty.suggestions == [] and empty.warning == EMPTY_WARNING
    assert empty.quality is None
    assert suggestions(project, [Record(id="e", title="", abstract=" ")]) == [[]]


def _interrupt_after(monkeypatch, n_batches: int, exc: BaseException) -> None:
    """`Tagger.tag` raises ``exc`` from its ``n_batches + 1``-th call on: counted in this
    process, so the runs it interrupts take ``--jobs 1``."""
    original = Tagger.tag
    calls = {"n": 0}

    def failing(self, records, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > n_batches:
            raise exc
        return original(self, records, *args, **kwargs)

    monkeypatch.setattr(Tagger, "tag", failing)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_resume_after_interruption_equals_an_uninterrupted_run(proj, tmp_path, monkeypatch,
                                                                suffix):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(_lines(tiny_records(300, seed=4))) + b"\n")
    full = tmp_path / f"full{suffix}"
    assert _suggest(proj, src, full, "--batch-size", "40").exit_code == 0

    out = tmp_path / f"out{suffix}"
    partial = tmp_path / f"out{suffix}.partial"
    with monkeypatch.context() as m:  # Ctrl-C while the fourth batch is tagged
        _interrupt_after(m, 3, KeyboardInterrupt())
        res = _suggest(proj, src, out, "--batch-size", "40", "--jobs", "1")
    assert res.exit_code == 130 and "--resume" in res.output and not out.exists()
    assert _ids(partial) == [f"r{i}" for i in range(120)]
    assert "160 records read: 120 tagged" in res.output  # the summary comes even so

    again = _suggest(proj, src, out, "--batch-size", "40")  # no --resume: refused, kept
    assert again.exit_code == 1 and "--resume" in again.output and len(_ids(partial)) == 120

    with monkeypatch.context() as m:  # a crash in the next run: exit 1, partial grows
        _interrupt_after(m, 2, RuntimeError("disk on fire"))
        crashed = _suggest(proj, src, out, "--batch-size", "40", "--resume", "--jobs", "1")
    assert crashed.exit_code == 1 and "RuntimeError: disk on fire" in crashed.output
    assert len(_ids(partial)) == 200

    # a killed process leaves a cut-off last line (plain) or an unfinished gzip stream
    raw = partial.read_bytes()
    partial.write_bytes(raw[:-30])
    done = _suggest(proj, src, out, "--batch-size", "40", "--resume")
    assert done.exit_code == 0, done.output
    assert "already done (--resume)" in done.output and not partial.exists()
    opener = gzip.open if suffix.endswith(".gz") else open
    with opener(out, "rb") as a, opener(full, "rb") as b:
        assert a.read() == b.read()


def _interrupt_at(monkeypatch, record_id: str, exc: BaseException) -> None:
    """`Tagger.tag` raises ``exc`` for the records holding ``record_id``, in whichever
    process tags them (the jobs are forked with it)."""
    original = Tagger.tag

    def failing(self, records, *args, **kwargs):
        if any(r.record.id == record_id for r in records):  # checked as read (`Checked`)
            raise exc
        return original(self, records, *args, **kwargs)

    monkeypatch.setattr(Tagger, "tag", failing)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), RuntimeError("disk on fire")])
def test_jobs_keep_the_finished_batches_of_an_interrupted_run(proj, tmp_path, monkeypatch,
                                                              exc):
    """With 2 jobs the answers equal one process's, and an interruption in a job keeps
    every batch finished before it; --resume completes the file (1 job or 2)."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(_lines(tiny_records(200, seed=4))) + b"\n")
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert _suggest(proj, src, one, "--batch-size", "40", "--jobs", "1").exit_code == 0
    assert _suggest(proj, src, two, "--batch-size", "40", "--jobs", "2").exit_code == 0
    assert two.read_bytes() == one.read_bytes()

    out, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    with monkeypatch.context() as m:  # r130 is in the fourth batch (r120…r159)
        _interrupt_at(m, "r130", exc)
        res = _suggest(proj, src, out, "--batch-size", "40", "--jobs", "2")
    assert res.exit_code == (130 if isinstance(exc, KeyboardInterrupt) else 1), res.output
    assert "--resume" in res.output and not out.exists()
    assert _ids(partial) == [f"r{i}" for i in range(120)]
    done = _suggest(proj, src, out, "--batch-size", "40", "--jobs", "2", "--resume")
    assert done.exit_code == 0, done.output
    assert out.read_bytes() == one.read_bytes()


def test_every_reading_command_names_bad_lines_and_goes_on(tmp_path):
    """train, records stats, eval and vocab load on the issue's mixed file."""
    vocab = tmp_path / "gnd-subjects.tsv"
    vocab.write_bytes(b"gnd_id\tlabel_de\tlabel_en\n" + b"".join(
        f"{s.id}\t{s.labels['de']}\t{s.labels['en']}\n".encode() for s in tiny_vocab())
        + b"9999-9\tKaf\xfffee\t\n")
    recs = tiny_records(4, seed=9)
    src = tmp_path / "mixed.jsonl"
    lines = _lines(recs)
    src.write_bytes(b"\n".join([lines[0], b'{"id": "x", "title": "Epen', lines[1]
                                .replace(b'"title": "', b'"title": "\xff'), *lines[2:]]) + b"\n")
    bad2, bad3 = f"{src}:2: ", f"{src}:3: not valid UTF-8"

    res = runner.invoke(app, ["vocab", "load", str(vocab), "--out", str(tmp_path / "gnd")])
    assert res.exit_code == 0 and f"{vocab}:" in res.output and "1 malformed" in res.output
    strict = runner.invoke(app, ["vocab", "load", str(vocab), "--out", str(tmp_path / "g2"),
                                 "--strict"])
    assert strict.exit_code == 1 and "not valid UTF-8" in strict.output

    res = runner.invoke(app, ["train", str(tmp_path / "p"), "--vocab", str(tmp_path / "gnd"),
                              "--train", str(src), "--recipe", "lexical"])
    assert res.exit_code == 0, res.output
    assert bad2 in res.output and bad3 in res.output and "3 records" in res.output
    res = runner.invoke(app, ["train", str(tmp_path / "p"), "--train", str(src), "--strict"])
    assert res.exit_code == 1 and bad2 in res.output

    res = runner.invoke(app, ["records", "stats", str(src)])
    assert res.exit_code == 0 and bad2 in res.output and bad3 in res.output
    assert "malformed items skipped │ 2" in re.sub(" +", " ", res.output)  # rich's padding

    pred = tmp_path / "pred.jsonl"
    pred.write_bytes(b"\n".join([json.dumps({"id": r.id, "subjects": r.subjects}).encode()
                                 for r in recs[:2]] + [b"\xff{}"]) + b"\n")
    res = runner.invoke(app, ["eval", str(src), str(pred), "--json"])
    assert res.exit_code == 0, res.output
    assert f"{pred}:3: not valid UTF-8" in res.output and bad2 in res.output
    overall = json.loads(res.output[res.output.index("{"):])["overall"]
    # gold r0, r2, r3 (r1 was the bad line); r0 predicted perfectly, r2 and r3 missing
    assert overall["n"] == 3 and overall["recall@5"] == pytest.approx(1 / 3)


SLOW_SUGGEST = """
import time
from tagalign.project import Tagger
original = Tagger.tag
def slow(self, *args, **kwargs):  # 0.1 s per batch, so the kill lands mid-run
    time.sleep(0.1)
    return original(self, *args, **kwargs)
Tagger.tag = slow
from tagalign.cli import app
app(prog_name="tagalign")
"""


def test_resume_after_a_killed_process_equals_an_uninterrupted_run(proj, tmp_path):
    import io
    import subprocess
    import sys
    import time

    import psutil

    from tagalign.io import parse_lines
    from tagalign.records import InputReport

    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(_lines(tiny_records(400, seed=6))) + b"\n")
    full = tmp_path / "full.jsonl.gz"
    assert _suggest(proj, src, full, "--batch-size", "10").exit_code == 0
    out = tmp_path / "out.jsonl.gz"
    partial = tmp_path / "out.jsonl.gz.partial"

    def finished() -> int:  # whole lines readable now (the gzip stream is still open)
        if not partial.exists():
            return 0
        quiet = InputReport(stream=io.StringIO())
        return sum(1 for _ in parse_lines(partial, quiet, lambda t, n: json.loads(t)))

    proc = subprocess.Popen([sys.executable, "-c", SLOW_SUGGEST, "suggest", str(proj),
                             "--input", str(src), "--output", str(out), "--limit", "5",
                             "--batch-size", "10", "--jobs", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while finished() < 50 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    jobs = psutil.Process(proc.pid).children()
    proc.kill()
    assert proc.wait() == -9, "the run ended before it could be killed"
    assert len(jobs) == 2
    # the killed run's jobs end with it (they would wait for work forever)
    assert psutil.wait_procs(jobs, timeout=30)[1] == []
    kept = finished()
    assert 50 <= kept < 400 and not out.exists()

    res = _suggest(proj, src, out, "--batch-size", "10", "--resume")
    assert res.exit_code == 0, res.output
    assert f"{kept} already done (--resume)" in res.output
    with gzip.open(out, "rb") as a, gzip.open(full, "rb") as b:
        assert a.read() == b.read()  # the same predictions (deflate blocks may differ)


def test_train_strict_applies_to_the_vocabulary(tmp_path):
    vocab = tmp_path / "v.tsv"
    vocab.write_bytes(b"gnd_id\tlabel_de\n1-1\tEpos\n2-2\tKaf\xfffee\n")
    src = tmp_path / "r.jsonl"
    src.write_bytes(json.dumps({"id": "a", "title": "Epos"}).encode() + b"\n")
    args = ["train", str(tmp_path / "p"), "--vocab", str(vocab), "--train", str(src),
            "--recipe", "lexical"]
    strict = runner.invoke(app, [*args, "--strict"])
    assert strict.exit_code == 1 and f"{vocab}:3: not valid UTF-8" in strict.output
    lenient = runner.invoke(app, args)
    assert lenient.exit_code == 0 and f"{vocab}:3: not valid UTF-8" in lenient.output


def test_huge_record_from_the_cli_is_cut_with_a_warning(proj, tmp_path):
    recs = tiny_records(2, seed=8)
    recs[0].abstract = "Holz " * 400_000  # 2 MB
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(_lines(recs)) + b"\n")
    out = tmp_path / "out.jsonl"
    res = _suggest(proj, src, out)
    assert res.exit_code == 0, res.output
    n = len(recs[0].title) + len(recs[0].abstract)
    assert f"record r0: text truncated to {MAX_TEXT_CHARS:,} of {n:,} characters" in res.output
    assert "2 records read: 2 tagged (0 empty: no suggestions, 1 truncated)" in res.output
    assert _ids(out) == ["r0", "r1"]
