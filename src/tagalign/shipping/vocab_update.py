"""Change files applied to a trained project without retraining (`update_vocabulary`,
``tagalign vocab update``), written into the folder as a download is.

What changes (`tagalign.vocab.changes.apply`): the project's vocabulary gains the new
headings (appended: every position a model's arrays know stays where it was), takes the
corrected labels and marks redirected, deleted and split headings retired; the model's
sources that know headings by their labels take the new ones (`Recipe.take_vocabulary`).
The project then records its vocabulary state in ``project.json`` (``vocabulary.state``:
the vocabulary it was trained with, the change files applied, the last one's date, the
counts, the split headings for a librarian to decide), with the updated vocabulary's new
fingerprint, which the model's manifest holds too: any other vocabulary is refused.

How it is written (`tagalign.shipping.swap`, as `download` writes): the whole new version
of the folder is made beside it (``.NAME.incoming``: the files that do not change
hard-linked, the vocabulary, the model and the config written anew), then swapped in with
the feedback store carried over, under the folder's download lock and its swap lock, which
a server's load takes shared: a failure anywhere before the swap leaves the project as it
was, and a served project picks the update up at its next reload (its model version
changed) or sees the old one whole. Applying files already applied (the same bytes) that
change nothing writes nothing."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagalign.errors import InputError
from tagalign.io import Reporter, atomic_dir, read_json, write_json_atomic
from tagalign.model_files import now
from tagalign.project import CONFIG_NAME, MODEL_DIR, WORK_DIR, Project
from tagalign.recipes.saved import MANIFEST
from tagalign.shipping import swap
from tagalign.shipping.archive import file_sha256
from tagalign.shipping.checks import FEEDBACK_FILES
from tagalign.vocab.changes import ChangeSet, read_changes, read_whole
from tagalign.vocab.changes.apply import VocabularyUpdate, plan_update
from tagalign.vocab.vocabulary import SAVED_NAME, Vocabulary

#: split headings the state lists (all of them are in the vocabulary: ``retired``)
SPLITS_SHOWN = 100
#: a change file's date, as the DNB names them (…_20240213…, …2024-02-13…)
_DATE = re.compile(r"(?<!\d)(\d{4})-?(\d{2})-?(\d{2})(?!\d)")


@dataclass
class UpdateResult:
    """What `update_vocabulary` did: the update weighed (``update``), whether it was
    written (False: nothing to change, or ``dry_run``) and the project's vocabulary state
    after it."""

    path: Path
    update: VocabularyUpdate
    written: bool
    state: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"project": str(self.path), "written": self.written,
                **self.update.to_dict(), "state": self.state}


def file_date(path: Path) -> str | None:
    """The date a change file's name gives (ISO 8601), if any."""
    found = _DATE.findall(Path(path).name)
    if not found:
        return None
    y, m, d = found[-1]
    return f"{y}-{m}-{d}"


def update_vocabulary(path: Path | str, files: Sequence[Path | str], *,
                      format: str | None = None, whole: bool = False, skip_bad: bool = False,
                      entity_types: str | None = None, report: Reporter | None = None,
                      option: str | None = None, dry_run: bool = False,
                      wait: float = 0.0) -> UpdateResult:
    """Apply change ``files`` (in the order given; ``whole``: one whole newer vocabulary,
    compared with the project's) to the trained project at ``path`` without retraining,
    atomically (see the module). A malformed record in any file applies nothing
    (`tagalign.vocab.changes.BadChangesError`, ``option`` naming the way to skip them)
    unless ``skip_bad``; ``dry_run`` weighs the files and writes nothing. Another update
    or download into the folder running, this one waits up to ``wait`` seconds, then
    raises `FolderBusyError`."""
    path, paths = Path(path), [Path(f) for f in files]
    if not paths:
        raise InputError("no change files given")
    if path.is_symlink():  # its swap would replace the link, not the folder it names
        raise InputError(f"{path} is a symbolic link; give the folder it points to")
    if whole and len(paths) != 1:
        raise InputError("a whole newer vocabulary is one file or folder, not several")
    with swap.downloading(path, wait):
        swap.recover(path)
        project = Project.load(path)
        recipe = project.trained_recipe()
        recipe.check_vocabulary_update()  # before anything is read: a refusal reads nothing
        changes: ChangeSet = (
            read_whole(paths[0], project.vocab, format=format, skip_bad=skip_bad,
                       report=report, entity_types=entity_types, option=option) if whole
            else read_changes(paths, format=format, skip_bad=skip_bad, report=report,
                              entity_types=entity_types, option=option))
        update = plan_update(changes, project.vocab)
        state = dict(project.config.vocabulary.get("state") or {})
        digests = [file_sha256(f) if f.is_file() else None for f in paths]
        known = {entry.get("sha256") for entry in state.get("applied", [])}
        if dry_run or (update.empty and all(d is not None and d in known for d in digests)):
            return UpdateResult(path, update, False, state)
        recipe.take_vocabulary(update)
        state = new_state(project, update, paths, digests)
        _write(project, update.new, state)
    return UpdateResult(path, update, True, state)


def new_state(project: Project, update: VocabularyUpdate, files: Sequence[Path],
              digests: Sequence[str | None]) -> dict[str, Any]:
    """The vocabulary state the project records after ``update``."""
    before = project.config.vocabulary
    state = dict(before.get("state") or {})
    vocab = update.new
    trained = state.get("trained_with") or {"size": before["size"],
                                            "fingerprint": before["fingerprint"]}
    applied = list(state.get("applied", []))
    at = now()
    for f, digest in zip(files, digests, strict=True):
        applied.append({"file": f.name, "sha256": digest, "date": file_date(f),
                        "applied_at": at})
    kinds = {kind: 0 for kind in ("redirected", "deleted", "split")}
    for kind, _ in vocab.retired.values():
        kinds[kind] += 1
    splits = [sid for sid, (kind, _) in vocab.retired.items() if kind == "split"]
    dates = [a["date"] for a in applied if a.get("date")]
    return {"trained_with": trained, "updates": int(state.get("updates", 0)) + 1,
            "last_file": files[-1].name, "last_date": max(dates) if dates else None,
            "updated_at": at, "applied": applied,
            "counts": {"subjects": len(vocab), "suggestable": vocab.n_suggestable,
                       "added": len(vocab) - trained["size"], **kinds,
                       "announced": len(update.announced)},
            "announced": update.announced[:SPLITS_SHOWN],
            "split": [{"id": sid, "label": vocab.label(sid)} for sid in splits[:SPLITS_SHOWN]]}


def _link(src: str, dst: str) -> None:
    """``src`` at ``dst`` too: a hard link (no copy of a large unchanged file: every file
    of a project is replaced by a rename, never written in place), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _write(project: Project, vocab: Vocabulary, state: dict[str, Any]) -> None:
    """The updated project into ``.NAME.incoming``, then swapped in (`swap.replace`)."""
    path = project.path
    recipe = project.trained_recipe()
    saved = read_json(path / MODEL_DIR / MANIFEST).get("saved")
    config = project.config
    config.vocabulary = {"size": len(vocab), "fingerprint": vocab.fingerprint,
                         "languages": vocab.languages, "state": state}
    skip = {MODEL_DIR, SAVED_NAME, CONFIG_NAME, WORK_DIR, *FEEDBACK_FILES}
    with atomic_dir(swap.incoming(path)) as tmp:
        os.chmod(tmp, path.stat().st_mode & 0o7777)  # as readable as the folder it replaces
        for entry in path.iterdir():
            if entry.name in skip or entry.name.startswith("."):
                continue
            if entry.is_dir():
                shutil.copytree(entry, tmp / entry.name, copy_function=_link)
            else:
                _link(str(entry), str(tmp / entry.name))
        vocab.save(tmp)
        recipe.save(tmp / MODEL_DIR, saved=saved)
        write_json_atomic(tmp / CONFIG_NAME, config.to_json())
        Vocabulary.load(tmp).check(config.vocabulary["fingerprint"], len(vocab),
                                   f"updated project {path}")
    swap.replace(path)


__all__ = ["UpdateResult", "file_date", "new_state", "update_vocabulary"]
