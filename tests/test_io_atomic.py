"""Atomic writes (`tagalign.io.atomic_path` and the writers built on it)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tagalign.io import atomic_path, atomic_text, load_npy, save_npy_atomic, write_bytes_atomic


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


def test_tfidf_neighbours_save_atomically_and_still_load_the_old_npz(tmp_path):
    """The TF-IDF neighbour source keeps its record matrices as npy parts (atomic, no
    pickle); a project saved before, with one ``.npz`` per language, still loads."""
    from types import SimpleNamespace

    import scipy.sparse as sp

    from tagalign.suggest.sources.neighbours import TfidfNeighbours

    X = sp.random(40, 25, density=0.2, format="csr", dtype=np.float32, random_state=0)
    src = TfidfNeighbours()
    src.fit(SimpleNamespace(memory=None, tfidf={"de": (np.arange(40), X)}))
    new, old = tmp_path / "new", tmp_path / "old"
    for folder in (new, old):
        folder.mkdir()
        src.save(folder)
    assert not list(new.glob("*.npz")) and not list(new.glob("*.tmp"))
    sp.save_npz(old / "tknn-de.npz", X)  # the layout before: .npz, rows in the meta
    (old / "tknn.json").write_text(json.dumps({"de": 40}))
    for folder in (new, old):
        loaded = TfidfNeighbours()
        loaded.load_state(folder, SimpleNamespace(memory=None))
        assert (loaded.X_["de"] != X).nnz == 0 and loaded.X_["de"].shape == (40, 25)
        np.testing.assert_array_equal(loaded.rows_["de"], np.arange(40))
