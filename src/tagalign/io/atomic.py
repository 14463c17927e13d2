"""Atomic, pickle-free persistence: every artifact a user trains is written through here.

A writer fills a temporary sibling, flushes it to disk (``fsync``), renames it over the
target and then flushes the folder that holds the name: after a crash or a power cut a
reader finds the old content or the new one, never half of it, and never an empty file
where the rename reached the disk before the data did.

A full disk (ENOSPC, or a used-up quota: EDQUOT) raises `NoSpaceError` naming the file or
folder being written, and the temporary sibling is removed, so the old content stays and no
half of the new one does. Native libraries do not all report it: omikuji and faiss may
close a file whose last buffer never reached the disk without an error, and safetensors or
LightGBM raise their own exception types. So `atomic_dir` writes a small probe file
(`probe_space`) before it renames a folder in, and after a block fails with an error that is
not an `OSError`: a disk with no room for the probe is a full disk (see docs/bad-input.md
for what this can and cannot see).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from tagalign.errors import NoSpaceError, TagalignError, file_error, is_no_space


def _fsync_file(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Make a rename or a new name in ``path`` durable (POSIX; Windows cannot open a
    folder for this, and its renames need no such step)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a file system that cannot sync folders (some network mounts)
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Every file and folder below ``root``, then ``root`` itself, flushed to disk."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                _fsync_file(full)
        fsync_dir(folder)


#: what `probe_space` writes: more than the buffer a native writer may lose unreported
#: (omikuji's and C stdio's are 8 KiB at most)
PROBE_BYTES = 64 * 1024


def probe_space(folder: str | Path) -> None:
    """Write `PROBE_BYTES` into ``folder`` (flushed to disk, then removed): raises the
    `OSError` of a full disk (ENOSPC, EDQUOT) when they do not fit. Run right after a
    library wrote there, it tells whether that library's last write could have been cut
    without a word."""
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".space-probe.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(bytes(PROBE_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)


def no_space_error(exc: BaseException, path: Path, probe: Path | None = None
                   ) -> NoSpaceError | None:
    """The `NoSpaceError` naming ``path`` that writing it failed with, when ``exc`` is (or
    comes from) a full disk; for an error of a native library (not an `OSError`, not one of
    ours) the folder ``probe`` is probed (`probe_space`) to tell, so call it before the
    failed write's bytes are deleted (they may be what filled the disk). None when the disk
    is not full."""
    if is_no_space(exc):  # a folder written inside another is named by the outer one
        return NoSpaceError.of(exc, path)
    if probe is None or isinstance(exc, OSError | TagalignError) \
            or not isinstance(exc, Exception):
        return None
    try:
        probe_space(probe)
    except OSError as failed:
        if is_no_space(failed):
            return NoSpaceError.of(failed, path)
    return None


@contextlib.contextmanager
def _named_when_full(path: Path) -> Iterator[None]:
    """A full disk while the temporary sibling of ``path`` is made: `NoSpaceError` naming
    ``path`` (the block's own failures are named before its files are deleted)."""
    try:
        yield
    except NoSpaceError:
        raise
    except OSError as exc:
        if not is_no_space(exc):
            raise
        raise NoSpaceError.of(exc, path) from exc


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[str]:
    """A temporary sibling file name to write to; once the block succeeds the file is
    flushed to disk and replaces ``path`` in one rename, and the rename is flushed too.
    A failing block removes the file. Readers see the old or the new content, never half.
    On a full disk: `NoSpaceError` naming ``path``."""
    path = Path(path)
    with _named_when_full(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            yield tmp
            _fsync_file(tmp)
            os.replace(tmp, path)
        except BaseException as exc:
            full = no_space_error(exc, path, probe=path.parent)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if full is not None:
                raise full from exc
            raise
        fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old or the new content, never half of it."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


@contextlib.contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """A text file handle whose content replaces ``path`` only once the block succeeds
    (gzip-compressed when the name ends in ``.gz``)."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    with atomic_path(path) as tmp, opener(tmp, "wt", encoding="utf-8") as fh:
        yield fh


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2).encode("utf-8"))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def read_json_input(path: Path, what: str | None = None) -> Any:
    """A JSON file the user named (``what``: how, e.g. ``--config``); one that cannot be
    read or parsed raises the package's error (`tagalign.errors.file_error`)."""
    try:
        return read_json(path)
    except (OSError, ValueError) as exc:
        raise file_error(path, exc, what) from exc


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(array), allow_pickle=False)


def load_npy(path: Path, mmap: bool = False) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def save_csr_atomic(folder: Path, prefix: str, matrix: Any, *, values: bool = True) -> None:
    """A scipy CSR matrix as ``{prefix}-indptr.npy`` (int64), ``-indices.npy`` (int32) and,
    with ``values``, ``-data.npy`` (float32), each written atomically and without pickle;
    the shape is the caller's to keep (beside its other metadata)."""
    save_npy_atomic(folder / f"{prefix}-indptr.npy", matrix.indptr.astype(np.int64))
    save_npy_atomic(folder / f"{prefix}-indices.npy", matrix.indices.astype(np.int32))
    if values:
        save_npy_atomic(folder / f"{prefix}-data.npy", matrix.data.astype(np.float32))


def load_csr(folder: Path, prefix: str, shape: tuple[int, int], *, values: bool = True,
             mmap: bool = False) -> Any:
    """The matrix `save_csr_atomic` wrote; without ``values`` every stored entry is 1.0.

    ``mmap``: indices and values stay mapped from their files (scipy keeps them as views);
    the row pointers are small and converted to the indices' dtype in memory."""
    import scipy.sparse as sp  # here: importing tagalign.io stays free of scipy

    indices = load_npy(folder / f"{prefix}-indices.npy", mmap)
    data = load_npy(folder / f"{prefix}-data.npy", mmap) if values else \
        np.ones(len(indices), np.float32)
    return sp.csr_matrix((data, indices, load_npy(folder / f"{prefix}-indptr.npy", mmap)),
                         shape=shape)


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success everything in it is flushed to disk and
    it replaces ``path`` in one rename (flushed too).

    A crash leaves the previous folder (or nothing) in place, never a half-written one.
    On a full disk (seen by the block's writes, or by `probe_space` before the rename):
    `NoSpaceError` naming ``path``, and the previous folder is kept.
    """
    path = Path(path)
    with _named_when_full(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
        try:
            yield tmp
            _fsync_tree(tmp)
            probe_space(tmp)  # a native writer's last buffer lost on a full disk
            _replace_dir(tmp, path)
        except BaseException as exc:
            full = no_space_error(exc, path, probe=tmp)
            shutil.rmtree(tmp, ignore_errors=True)
            if full is not None:
                raise full from exc
            raise


def _replace_dir(tmp: Path, path: Path) -> None:
    """``tmp`` becomes ``path``; the previous ``path`` is put back if that fails."""
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old is not None:
            os.replace(old, path)
        raise
    fsync_dir(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
