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
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
from pathlib import Path

from tagalign.io import fsync_dir
from tagalign.project import CONFIG_NAME, WORK_DIR
from tagalign.shipping.checks import FEEDBACK_FILES, TargetExistsError

log = logging.getLogger(__name__)


def incoming(target: Path) -> Path:
    return target.with_name(f".{target.name}.incoming")


def _replaced(target: Path) -> Path:
    return target.with_name(f".{target.name}.replaced")


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
    files of the project it replaces; returns the names of the files carried over."""
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
            recover(target)
        raise
    if carried:
        log.info("%s: kept the feedback store (%s)", target, ", ".join(carried))
    return carried


def recover(target: Path) -> None:
    """Finish a replacement a crash cut short (see the module docstring), or drop a verified
    download that never got to replace anything."""
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
