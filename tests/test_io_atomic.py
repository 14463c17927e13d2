"""Atomic writes (`tagalign.io.atomic_path` and the writers built on it)."""

from __future__ import annotations

import gzip

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
