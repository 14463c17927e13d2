"""A full disk stops every CLI write path with one clear line, keeps what was finished,
leaves no half-written file a later run would trust, and the rerun completes (issue 46).

Each test mounts a size-limited tmpfs (root only) and fills it with a ballast file so that
the command runs out of room part-way; deleting the ballast frees the space again. The
tiny shared hybrid and a hundred-odd tiny records keep each test to a second or two.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.errors import NoSpaceError
from tagalign.io import InputReport, atomic_dir
from tagalign.project import Project
from tagalign.records.marc.reader import iter_marc_records
from tagalign.shipping import project_files
from tiny_models import tiny_records

runner = CliRunner()


@contextlib.contextmanager
def small_fs(path: Path, kb: int) -> Iterator[Path]:
    """A tmpfs of ``kb`` KiB mounted at ``path`` for the block."""
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a size-limited tmpfs here (needs root or CAP_SYS_ADMIN): "
                    f"{done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(fs: Path, leave: int) -> Path:
    """A ballast file that leaves about ``leave`` bytes free on ``fs``."""
    ballast = fs / "ballast"
    size = shutil.disk_usage(fs).free - leave
    assert size > 0, f"{fs} has {shutil.disk_usage(fs).free} bytes free, fewer than {leave}"
    with open(ballast, "ab") as fh:
        fh.write(bytes(size))
    return ballast


def cli(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def error_line(res) -> str:
    """The one ``error:`` line of a failed command (exit status 1, no traceback)."""
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def tree(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """SHA-256 of every file below ``folder`` (but ``skip``'s top-level names)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] not in skip}


def hidden(folder: Path) -> list[str]:
    """Temporary files and folders (hidden names) left anywhere below ``folder``."""
    return [p.relative_to(folder).as_posix() for p in folder.rglob(".*")]


def write_records(path: Path, n: int, seed: int) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for r in tiny_records(n, seed):
            fh.write(json.dumps({"id": r.id, "title": r.title, "abstract": r.abstract,
                                 "language": r.language, "subjects": list(r.subjects)}) + "\n")
    return path


def test_train_stops_keeps_the_model_and_finished_phases_then_resumes(tiny_hybrid, tmp_path):
    records = write_records(tmp_path / "train.jsonl", 120, seed=1)
    with small_fs(tmp_path / "fs", 2048) as fs:
        project = Path(shutil.copytree(tiny_hybrid, fs / "p"))
        before, work = tree(project), project / "work"
        ballast = fill(fs, leave=160 * 1024)

        line = error_line(cli("train", project, "--train", records))
        assert re.fullmatch(
            rf"error: no space left on device writing {re.escape(str(work))}/[\w -]+: free "
            rf"space and rerun: the phases finished so far are kept in "
            rf"{re.escape(str(work))} and reused", line), line
        assert tree(project, skip=("work",)) == before  # the trained model, as it was
        finished = sorted(p.name for p in work.iterdir())
        assert finished and all((work / name / "phase.json").is_file() for name in finished)
        assert not hidden(project)  # no half-written phase or model folder

        ballast.unlink()
        res = cli("train", project, "--train", records)
        assert res.exit_code == 0, res.output
        for name in finished:
            assert f"✓ {name}: finished earlier, resuming" in res.stderr
        assert not work.exists() and not hidden(project)
        assert tree(project)["model/recipe.json"] != before["model/recipe.json"]
        assert Project.load(project).is_trained


def marc_ids(path: Path) -> list[str]:
    quiet = InputReport(stream=io.StringIO(), max_shown=0)
    return [rec.id for _, rec in iter_marc_records(path, quiet)]


def json_ids(path: Path) -> list[str]:
    """Ids of the whole prediction lines of ``path``."""
    ids = []
    for line in path.read_text("utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            ids.append(json.loads(line)["id"])
    return ids


def same_day(data: bytes) -> bytes:
    """MARC output without its ``883 $d`` dates (two runs may straddle midnight)."""
    return re.sub(rb"\x1fd\d{8}", b"", data)


@pytest.mark.parametrize(("name", "fmt", "ids", "end"), [
    ("pred.jsonl", "jsonl", json_ids, b"\n"),
    ("pred.mrc", "marc", marc_ids, b"\x1d")])  # MARC's record terminator
def test_suggest_keeps_finished_records_drops_a_cut_one_and_resumes(
        tiny_hybrid, tmp_path, name, fmt, ids, end):
    records = write_records(tmp_path / "in.jsonl", 150, seed=3)
    options = ("--format", fmt, "--batch-size", "10", "--jobs", "1")
    reference = tmp_path / name
    assert cli("suggest", tiny_hybrid, "--input", records, "--output", reference,
               *options).exit_code == 0
    expected = ids(reference)
    with small_fs(tmp_path / "fs", 512) as fs:
        out = fs / name
        partial = fs / f"{name}.partial"
        ballast = fill(fs, leave=64 * 1024)

        line = error_line(cli("suggest", tiny_hybrid, "--input", records, "--output", out,
                              *options))
        found = re.fullmatch(
            rf"error: no space left on device writing {re.escape(str(partial))}: free space "
            rf"and rerun the same command with --resume \((\d+) finished records are kept "
            rf"in {re.escape(str(partial))}\)", line)
        assert found, line
        kept = int(found.group(1))
        assert 0 < kept < len(expected) and not out.exists()
        assert sorted(p.name for p in fs.iterdir()) == ["ballast", partial.name]
        whole = ids(partial)
        assert whole[:kept] == expected[:kept] and len(whole) >= kept
        # the write that found the disk full cut its record short; --resume must drop it
        assert not partial.read_bytes().endswith(end)

        ballast.unlink()
        res = cli("suggest", tiny_hybrid, "--input", records, "--output", out, *options,
                  "--resume")
        assert res.exit_code == 0, res.output
        assert f"{len(whole)} already done (--resume)" in res.stderr
        # every record once, none cut: the cut-off last record was made again
        assert same_day(out.read_bytes()) == same_day(reference.read_bytes())
        assert sorted(p.name for p in fs.iterdir()) == [name]


def test_download_force_keeps_the_project_and_its_feedback_then_replaces(
        tiny_hybrid, tmp_path):
    update = Path(shutil.copytree(tiny_hybrid, tmp_path / "new" / "p"))
    Project.load(update).set_defaults(5, 0.25)  # the new version says so in project.json
    store = tmp_path / "store"
    assert cli("upload", update, f"file://{store}/").exit_code == 0
    url = f"file://{store}/p.tar.gz"
    need = sum(p.stat().st_size for _, p in project_files(update))
    with small_fs(tmp_path / "fs", 1024) as fs:
        project = Path(shutil.copytree(tiny_hybrid, fs / "p"))
        with sqlite3.connect(project / "feedback.sqlite") as db:
            db.execute("CREATE TABLE decisions (record TEXT, subject TEXT)")
            db.executemany("INSERT INTO decisions VALUES (?, ?)",
                           [("r1", "4015065-3"), ("r2", "4046076-9")])
        db.close()
        before = tree(project)
        rerun = f"free space and rerun the download (the project in {project} is kept as it was)"

        # too little room for the files the manifest lists: refused before a byte is written
        ballast = fill(fs, leave=need // 2)
        line = error_line(cli("download", url, "--into", project, "--force"))
        assert re.fullmatch(
            rf"error: no space left on device writing {re.escape(str(project))} \(the files "
            rf"of {re.escape(url)} need {need} bytes, \d+ are free in {re.escape(str(fs))}\): "
            rf"{re.escape(rerun)}", line), line
        assert tree(project) == before and entries(fs) == ["ballast", "p"]

        # room for the bytes, not for the blocks they take: the writing finds the disk full
        ballast.unlink()
        ballast = fill(fs, leave=need + 8192)
        line = error_line(cli("download", url, "--into", project, "--force"))
        assert line == f"error: no space left on device writing {project}: {rerun}"
        assert tree(project) == before and entries(fs) == ["ballast", "p"]

        ballast.unlink()
        res = cli("download", url, "--into", project, "--force")
        assert res.exit_code == 0, res.output
        assert json.loads((project / "project.json").read_text())["limit"] == 5
        after = tree(project)
        assert after["feedback.sqlite"] == before["feedback.sqlite"]  # moved, untouched
        with sqlite3.connect(project / "feedback.sqlite") as db:
            assert db.execute("SELECT count(*) FROM decisions").fetchone() == (2,)
        db.close()
        assert entries(fs) == ["p"]


def entries(folder: Path) -> list[str]:
    """What ``folder`` holds but the download's lock files (`tagalign.shipping.swap`: kept
    beside the project on purpose)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def test_upload_to_a_full_store_keeps_the_archive_before_and_leaves_no_partial(
        tiny_hybrid, tmp_path):
    with small_fs(tmp_path / "fs", 512) as fs:
        url = f"file://{fs}/store/"
        target = f"{url}tiny-hybrid.tar.gz"
        archive = fs / "store" / "tiny-hybrid.tar.gz"
        assert cli("upload", tiny_hybrid, url).exit_code == 0
        earlier = archive.read_bytes()
        ballast = fill(fs, leave=32 * 1024)

        line = error_line(cli("upload", tiny_hybrid, url))
        assert line == f"error: no space left on device writing {target}: free space and " \
                       "rerun the upload"
        assert archive.read_bytes() == earlier
        assert sorted(p.name for p in (fs / "store").iterdir()) == [archive.name]

        ballast.unlink()
        assert cli("upload", tiny_hybrid, url).exit_code == 0
        res = cli("download", target, "--into", tmp_path / "fetched")
        assert res.exit_code == 0, res.output
        assert tree(tmp_path / "fetched") == tree(tiny_hybrid)


def test_native_libraries_that_do_not_report_a_full_disk_are_caught(tiny_hybrid, tmp_path):
    """omikuji (as faiss for small files) closes a file whose last buffer found the disk
    full without an error; faiss raises a bare RuntimeError for a large write, whose bytes
    so far fill the disk until they are deleted: `atomic_dir` tells both, before it
    deletes anything, and keeps the folder out."""
    import faiss
    import numpy as np
    import omikuji

    model = omikuji.Model.load(str(tiny_hybrid / "model" / "sources" / "omikuji" /
                                   "omikuji-de"))
    index = faiss.IndexFlatIP(16)
    index.add(np.random.default_rng(0).random((2000, 16), dtype=np.float32))  # 128 KiB
    with small_fs(tmp_path / "fs", 512) as fs:
        ballast = fill(fs, leave=4096)
        model.save(str(fs / "unchecked"))  # the library's own word: nothing went wrong
        assert any(p.stat().st_size == 0 for p in (fs / "unchecked").glob("tree*.cbor"))
        shutil.rmtree(fs / "unchecked")

        with pytest.raises(NoSpaceError) as info, atomic_dir(fs / "omikuji") as tmp:
            model.save(str(tmp))
        assert info.value.path == fs / "omikuji"
        assert sorted(p.name for p in fs.iterdir()) == ["ballast"]

        ballast.unlink()
        ballast = fill(fs, leave=96 * 1024)  # more than the probe, less than the index
        with pytest.raises(NoSpaceError) as info, atomic_dir(fs / "model") as outer, \
                atomic_dir(outer / "index") as tmp:
            faiss.write_index(index, str(tmp / "index.faiss"))
        assert info.value.path == fs / "model"  # the folder the user knows, not a temp one
        assert isinstance(info.value.__cause__, NoSpaceError)
        assert sorted(p.name for p in fs.iterdir()) == ["ballast"]

        ballast.unlink()
        with atomic_dir(fs / "omikuji") as tmp:
            model.save(str(tmp))
        omikuji.Model.load(str(fs / "omikuji"))
