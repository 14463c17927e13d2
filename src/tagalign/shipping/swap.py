"""A verified download replaces a project folder and keeps what no archive carries.

The feedback store (``feedback.sqlite`` and SQLite's ``-wal``, ``-shm`` and ``-journal``
side files, after a best-effort checkpoint) is *moved* into the new version: a rename keeps
the file a running server holds open, under the same path, so the server's next decisions
land in the new folder's store. ``work/`` (the phases of an interrupted training of the
replaced version, of no use to the new one) and everything else of the old folder is
dropped. Only a folder holding ``project.json`` is replaced.

Every step is a rename inside the target's parent folder (one file system):

1. the verified download becomes ``.NAME.incoming`` (`tagalign.io.atomic_dir`);
2. the project folder ``NAME`` becomes ``.NAME.replaced``;
3. the feedback files move from ``.NAME.replaced`` into ``.NAME.incoming``;
4. ``.NAME.incoming`` becomes ``NAME``;
5. ``.NAME.replaced`` is deleted.

A crash before 2 leaves the old project as it was; one between 2 and 4 leaves no ``NAME``,
but both halves beside it: the next download into ``NAME`` (`recover`) first finishes
steps 3 to 5, so the new version with the old feedback is in place, and nothing is lost.

Two locks beside the folder keep readers and writers apart (``flock``: the kernel releases
a lock when its process ends, however it ends, so a crashed download never blocks the
next one; the files stay, empty but for a pid):

- ``.NAME.download.lock``, held for a whole download (`downloading`): a second download
  into ``NAME`` waits up to ``wait`` seconds, then is refused naming the pid of the one
  running, so two downloads never interleave their steps;
- ``.NAME.swap.lock``, held exclusively for steps 2 to 5 and by `recover`, shared by a
  server while it loads the folder (`read_whole`): a load sees the old version or the
  new one whole, and a swap waits (seconds) for the loads under way.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from tagalign.io import fsync_dir
from tagalign.project import CONFIG_NAME, WORK_DIR
from tagalign.shipping.checks import FEEDBACK_FILES, FolderBusyError, TargetExistsError

log = logging.getLogger(__name__)

T = TypeVar("T")
#: seconds a swap waits for the loads of the folder under way, and a load for a swap
SWAP_WAIT = 120.0
#: seconds between two tries of a lock held by another process
POLL = 0.05


def incoming(target: Path) -> Path:
    return target.with_name(f".{target.name}.incoming")


def _replaced(target: Path) -> Path:
    return target.with_name(f".{target.name}.replaced")


def lock_file(target: Path, kind: str) -> Path:
    """``.NAME.download.lock`` or ``.NAME.swap.lock`` beside the folder ``NAME``."""
    return target.with_name(f".{target.name}.{kind}.lock")


def _acquire(fd: int, mode: int, wait: float, waiting: Callable[[], None]) -> bool:
    """``flock`` ``mode`` on ``fd`` within ``wait`` seconds (``waiting`` called once if it
    has to wait); whether it got it. Polled, so the wait is bounded without a signal."""
    deadline = time.monotonic() + wait
    told = False
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            if not told:
                waiting()
                told = True
            time.sleep(POLL)


def _holder(lock: Path) -> str:
    """The pid the lock's holder wrote, as text ("unknown" while it has not yet)."""
    try:
        pid = lock.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    return pid if pid.isdigit() else "unknown"


@contextlib.contextmanager
def downloading(target: Path, wait: float = 0.0) -> Iterator[None]:
    """One download into ``target`` at a time: another one running, this one waits up to
    ``wait`` seconds, then `FolderBusyError` names the other's pid."""
    lock = lock_file(target, "download")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _acquire(fd, fcntl.LOCK_EX, wait, lambda: log.warning(
                "another download into %s is running (pid %s); waiting up to %.0f s",
                target, _holder(lock), wait)):
            raise FolderBusyError(
                f"another download into {target} is running (pid {_holder(lock)}); "
                "run this one when it has finished, or give --wait SECONDS")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def _swapping(target: Path) -> Iterator[None]:
    """The swap lock, exclusive: no server is loading ``target`` meanwhile."""
    lock = lock_file(target, "swap")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _acquire(fd, fcntl.LOCK_EX, SWAP_WAIT, lambda: log.info(
                "%s: waiting for the servers loading it to finish", target)):
            raise FolderBusyError(f"{target}: a server has been loading it for "
                                  f"{SWAP_WAIT:.0f} s; the download was not swapped in, "
                                  "run it again")
        yield
    finally:
        os.close(fd)


def _open_shared(lock: Path) -> int | None:
    """The swap lock opened for a shared lock, or None when there is none (no download
    has ever written the folder) or it cannot be opened."""
    try:
        return os.open(lock, os.O_RDONLY)
    except OSError:
        return None


def read_whole(folders: Iterable[Path], read: Callable[[], T]) -> T:
    """``read()`` (a load of the project folders) while no download swaps them, so it sees
    each folder's old version or its new one whole, never a mix: the swap lock shared. A
    folder without a lock (never downloaded into, or a parent this process cannot read) is
    read without one, and read again if a download made the lock meanwhile."""
    folders = [Path(f) for f in folders]
    unlocked = [f for f in folders if not lock_file(f, "swap").exists()]
    with contextlib.ExitStack() as held:
        for folder in folders:
            fd = _open_shared(lock_file(folder, "swap"))
            if fd is None:
                continue
            held.callback(os.close, fd)
            if not _acquire(fd, fcntl.LOCK_SH, SWAP_WAIT, lambda: None):
                raise FolderBusyError(f"{folder}: a download has been swapping it for "
                                      f"{SWAP_WAIT:.0f} s")
        result = read()
    if any(lock_file(f, "swap").exists() for f in unlocked):  # a download began meanwhile
        return read_whole(folders, read)
    return result


def check_replaceable(target: Path, force: bool) -> None:
    """Refuses a target that exists, unless ``force`` and it is a project folder (or an
    empty one): ``--force`` never deletes a folder that is not a project."""
    if not target.exists() and not target.is_symlink():
        return
    if not force:
        raise TargetExistsError(f"{target} exists; give --force to replace it (it is kept "
                                "unless the download verifies)")
    if target.is_symlink():
        raise TargetExistsError(f"{target} is a symbolic link; give the folder it points to "
                                "as --into")
    if not target.is_dir():
        raise TargetExistsError(f"{target} is not a folder; --force replaces only a tagalign "
                                "project folder")
    if (target / CONFIG_NAME).is_file():
        return
    entries = sorted(p.name + "/" * p.is_dir() for p in target.iterdir())
    if entries:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more"
                                           if len(entries) > 5 else "")
        raise TargetExistsError(f"{target} is not a tagalign project (no {CONFIG_NAME}) and "
                                f"holds {shown}; --force replaces only a project: give "
                                "another --into")


def _checkpoint(db: Path) -> None:
    """Fold the write-ahead log into the database file, so the main file alone holds every
    decision; the side files are moved all the same (a server may write meanwhile)."""
    if not db.is_file():
        return
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=rw", uri=True, timeout=2)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()


def _carry(old: Path, new: Path) -> list[str]:
    """Step 3: the feedback files of ``old`` not yet in ``new`` move there."""
    moved = []
    for name in FEEDBACK_FILES:
        if (old / name).exists() and not (new / name).exists():
            os.replace(old / name, new / name)
            moved.append(name)
    return moved


def _rename_in(src: Path, target: Path) -> None:
    """Step 4."""
    os.replace(src, target)
    fsync_dir(target.parent)


def _finish(target: Path, new: Path, old: Path) -> list[str]:
    """Steps 3 to 5, each safe to repeat."""
    carried = _carry(old, new)
    fsync_dir(new)
    _rename_in(new, target)
    shutil.rmtree(old, ignore_errors=True)
    return carried


def replace(target: Path) -> list[str]:
    """Steps 2 to 5: the verified ``incoming(target)`` becomes ``target``, with the feedback
    files of the project it replaces; returns the names of the files carried over. Waits
    for the servers loading ``target`` (`read_whole`); if they take longer than
    `SWAP_WAIT`, drops the download and raises `FolderBusyError`."""
    try:
        with _swapping(target):
            return _replace(target)
    except FolderBusyError:
        shutil.rmtree(incoming(target), ignore_errors=True)
        raise


def _replace(target: Path) -> list[str]:
    new, old = incoming(target), _replaced(target)
    if not target.exists():
        _rename_in(new, target)
        return []
    if (target / WORK_DIR).exists():
        log.info("%s: dropping %s/ (an interrupted training of the replaced version)",
                 target, WORK_DIR)
    _checkpoint(target / FEEDBACK_FILES[0])
    os.replace(target, old)
    try:
        carried = _finish(target, new, old)
    except Exception:  # put things right now rather than at the next download
        with contextlib.suppress(OSError):
            _recover(target)
        raise
    if carried:
        log.info("%s: kept the feedback store (%s)", target, ", ".join(carried))
    return carried


def recover(target: Path) -> None:
    """Finish a replacement a crash cut short (see the module docstring), or drop a verified
    download that never got to replace anything."""
    new, old = incoming(target), _replaced(target)
    if not (old.exists() or new.exists()):
        return  # the common case, without a lock file made for nothing
    with _swapping(target):
        _recover(target)


def _recover(target: Path) -> None:
    new, old = incoming(target), _replaced(target)
    if old.exists():
        if target.exists():  # crashed after step 4
            _carry(old, target)
            shutil.rmtree(old, ignore_errors=True)
        elif new.exists():  # crashed between steps 2 and 4
            log.warning("%s: finishing a replacement cut short", target)
            _finish(target, new, old)
        else:  # the new half is gone: the old project goes back
            os.replace(old, target)
    elif new.exists():
        if target.exists():  # crashed before step 2: the old project stays
            shutil.rmtree(new, ignore_errors=True)
        else:  # a first download crashed before step 4
            _rename_in(new, target)
