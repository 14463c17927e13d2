"""Atomic writes (`tagalign.io.atomic_path` and the writers built on it)."""

from __future__ import annotations

import gzip
import json
import os
import stat

import numpy as np
import pytest

from tagalign.io import (
    atomic_dir,
    atomic_path,
    atomic_text,
    load_npy,
    save_csr_atomic,
    save_npy_atomic,
    write_bytes_atomic,
    write_json_atomic,
)


def test_atomic_writers_replace_whole_files_or_leave_the_old_one(tmp_path):
    write_bytes_atomic(tmp_path / "sub" / "a.bin", b"old")
    assert (tmp_path / "sub" / "a.bin").read_bytes() == b"old"  # parent folder created
    write_bytes_atomic(tmp_path / "sub" / "a.bin", b"new")
    assert (tmp_path / "sub" / "a.bin").read_bytes() == b"new"

    with atomic_text(tmp_path / "t.txt.gz") as fh:
        fh.write("Pilze\n")
    with pytest.raises(RuntimeError), atomic_text(tmp_path / "t.txt.gz") as fh:
        fh.write("half")
        raise RuntimeError("killed")
    assert gzip.decompress((tmp_path / "t.txt.gz").read_bytes()) == b"Pilze\n"

    with pytest.raises(OSError), atomic_path(tmp_path / "c.bin") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(b"x" * 10)
        raise OSError("disk full")
    assert not (tmp_path / "c.bin").exists()

    save_npy_atomic(tmp_path / "x.npy", np.arange(4, dtype=np.int32))
    assert load_npy(tmp_path / "x.npy").tolist() == [0, 1, 2, 3]
    # nothing but the finished files: no temporary file left behind by the failed writes
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.bin", "sub", "t.txt.gz", "x.npy"]


def _write_text(path):
    with atomic_text(path) as fh:
        fh.write("x")


def _write_path(path):
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(b"x")


def _write_dir(path):
    with atomic_dir(path) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.bin").write_bytes(b"x")  # written plainly, flushed by atomic_dir


def _write_csr(path):
    import scipy.sparse as sp

    path.mkdir()
    save_csr_atomic(path, "m", sp.identity(3, format="csr", dtype=np.float32))


WRITERS = {
    "write_bytes_atomic": lambda p: write_bytes_atomic(p, b"x"),
    "write_json_atomic": lambda p: write_json_atomic(p, {"a": 1}),
    "atomic_text": _write_text,
    "atomic_text .gz": lambda p: _write_text(p.with_suffix(".gz")),
    "save_npy_atomic": lambda p: save_npy_atomic(p, np.arange(3)),
    "save_csr_atomic": _write_csr,
    "atomic_path": _write_path,
    "atomic_dir": _write_dir,
}


@pytest.mark.parametrize("writer", WRITERS)
def test_every_atomic_writer_fsyncs_the_data_before_the_rename_and_the_folder_after(
        tmp_path, monkeypatch, writer):
    """A rename that reaches the disk before the data leaves an empty file after a power
    cut; an unsynced folder may lose the rename itself."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    WRITERS[writer](tmp_path / "out")
    renames = [i for i, e in enumerate(events) if e == "replace"]
    assert renames, events
    for i in renames:  # each rename: its data synced before, its folder after
        assert "fsync file" in events[:i], events
        assert "fsync dir" in events[i + 1:], events
    if writer == "atomic_dir":  # the file written inside, its folder and the parent
        assert events.count("fsync file") >= 1 and events.count("fsync dir") >= 3, events


def test_tfidf_neighbours_save_atomically_and_refuse_the_old_npz(tmp_path):
    """The TF-IDF neighbour source keeps its record matrices as npy parts (atomic, no
    pickle); the layout before (one ``.npz`` per language) is refused (issue 29: a project
    turns that into the message to retrain, tests/test_quality.py)."""
    import scipy.sparse as sp

    from tagalign.suggest.sources.base import FitContext
    from tagalign.suggest.sources.neighbours import TfidfNeighbours
    from tagalign.text import Analyzer
    from tagalign.vocab import Vocabulary

    ctx = FitContext(Vocabulary([]), Analyzer())

    X = sp.random(40, 25, density=0.2, format="csr", dtype=np.float32, random_state=0)
    src = TfidfNeighbours()
    src.fit(FitContext(Vocabulary([]), Analyzer(), tfidf={"de": (np.arange(40), X)}))
    new, old = tmp_path / "new", tmp_path / "old"
    for folder in (new, old):
        folder.mkdir()
        src.save(folder)
    assert not list(new.glob("*.npz")) and not list(new.glob("*.tmp"))
    sp.save_npz(old / "tknn-de.npz", X)  # the layout before: .npz, rows in the meta
    (old / "tknn.json").write_text(json.dumps({"de": 40}))
    loaded = TfidfNeighbours()
    loaded.load_state(new, ctx)
    assert (loaded.X_["de"] != X).nnz == 0 and loaded.X_["de"].shape == (40, 25)
    np.testing.assert_array_equal(loaded.rows_["de"], np.arange(40))
    with pytest.raises(TypeError):
        TfidfNeighbours().load_state(old, ctx)
