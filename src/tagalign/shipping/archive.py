"""Ship a trained project: one tar archive per project, to and from any fsspec store.

`upload` writes ``manifest.json`` first, then the project's files under ``project/``; the
manifest holds the SHA-256 and size of every file, the tagalign and library versions, the
recipe and the vocabulary fingerprint. `fsspec` opens the URL, so ``file://``,
``memory://``, ``s3://`` (``pip install 'tagalign[s3]'``) and ``hf://`` (Hugging Face Hub,
through huggingface_hub's file system) need no code of ours per store.

`download` streams the archive and refuses it — leaving an existing project untouched —
unless every entry is a regular file under ``project/`` that stays inside the target
folder, is listed in the manifest with the hash and size it has, and the manifest lists
no file the archive lacks; pickles are refused on both sides. The files are written into
a temporary sibling folder that replaces the target in one rename only after all checks
passed (`tagalign.io.atomic_dir`).

Not shipped: ``work/`` (an interrupted training's phases), the feedback store
(``feedback.sqlite``: librarians' decisions stay where they were made) and hidden
temporary files.

Trust (as Annif's ``--trust-repo``): a local source (``file://``, a plain path,
``memory://``) is trusted; any other store needs ``trust=True``, since a project's
files decide what the server runs.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

import fsspec
from fsspec.core import split_protocol, url_to_fs

from tagalign.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    NotTrainedError,
    PermissionDeniedError,
)
from tagalign.io import atomic_dir, versions
from tagalign.project import CONFIG_NAME, WORK_DIR, Project, ProjectError
from tagalign.vocab import VocabularyMismatchError

FORMAT = "tagalign-archive"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ROOT = "project"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
#: top-level entries of a project folder never shipped (see the module docstring)
NOT_SHIPPED = {WORK_DIR, "feedback.sqlite", "feedback.sqlite-journal", "feedback.sqlite-wal",
               "feedback.sqlite-shm"}
LOCAL_PROTOCOLS = {"file", "local", "memory"}
PICKLE_SUFFIXES = {".pkl", ".pickle", ".joblib", ".pt", ".pth", ".ckpt"}
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
CHUNK = 1 << 20


class ShippingError(InputError):
    """An archive cannot be written, or is refused."""


class TargetExistsError(ShippingError, ConflictError):
    """The folder a download would write holds something (``force`` replaces it)."""


class UntrustedSourceError(PermissionDeniedError, ShippingError):
    """A download from a remote store without ``trust``."""


def is_trusted(url: str) -> bool:
    """Local sources are trusted: ``file://``, plain paths and ``memory://``."""
    return (split_protocol(url)[0] or "file") in LOCAL_PROTOCOLS


def archive_url(url: str, project_id: str) -> str:
    """``url`` itself when it names an archive, else ``url/<project_id>.tar.gz``."""
    if url.endswith(ARCHIVE_SUFFIXES):
        return url
    return url.rstrip("/") + f"/{project_id}.tar.gz"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _looks_pickled(name: str, head: bytes) -> bool:
    """A pickle by name or by its first bytes (protocol 2+ starts with 0x80 and the
    protocol number; torch's zip checkpoints hold a ``data.pkl``)."""
    if PurePosixPath(name).suffix.lower() in PICKLE_SUFFIXES:
        return True
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    return head.startswith(b"PK\x03\x04") and b".pkl" in head


def project_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """``(archive name relative to the folder, path)`` of every file shipped, sorted."""
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if rel.parts[0] in NOT_SHIPPED or any(p.startswith(".") for p in rel.parts):
            continue
        if path.is_symlink():
            raise ShippingError(f"{path} is a symbolic link; archives hold regular files only")
        if path.is_file():
            with open(path, "rb") as fh:
                head = fh.read(512)
            if _looks_pickled(rel.as_posix(), head):
                raise ShippingError(f"{path} looks like a pickle; tagalign ships no pickles")
            yield rel.as_posix(), path


def build_manifest(project: Project, files: list[tuple[str, Path]]) -> dict[str, Any]:
    c = project.config
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "project": project.path.name, "name": c.get("name"), "recipe": c.get("recipe"),
        "params": c.get("params", {}), "vocabulary": c["vocabulary"],
        "trained_at": c.get("trained_at"), "versions": versions(),
        "packed": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "files": {rel: {"sha256": _sha256(p), "size": p.stat().st_size} for rel, p in files},
    }


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def upload(project_dir: Path | str, url: str,
           storage_options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Pack a trained project into one archive at ``url`` (see `archive_url`); returns the
    archive's URL and its manifest. Written under a ``.partial`` name, renamed at the end."""
    try:
        project = Project.load(project_dir)
    except FileNotFoundError as exc:
        raise NotFoundError(str(exc)) from None
    if not project.is_trained:
        raise NotTrainedError(f"project {project_dir}", "nothing to ship")
    files = list(project_files(project.path))
    manifest = build_manifest(project, files)
    target = archive_url(url, project.path.name)
    fs, path = url_to_fs(target, **(storage_options or {}))
    partial = path + ".partial"
    with contextlib.suppress(OSError, NotImplementedError):  # object stores have no folders
        fs.makedirs(fs._parent(path), exist_ok=True)
    mode = "w|gz" if target.endswith((".gz", ".tgz")) else "w|"
    with fs.open(partial, "wb") as out, tarfile.open(fileobj=out, mode=mode) as tar:
        _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))
        for rel, p in files:
            info = tar.gettarinfo(str(p), arcname=f"{ROOT}/{rel}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(p, "rb") as fh:
                tar.addfile(info, fh)
    fs.mv(partial, path)
    return target, manifest


def _read_manifest(tar: tarfile.TarFile, url: str) -> dict[str, Any]:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isfile():
        raise ShippingError(f"{url}: not a tagalign archive ({MANIFEST} must come first)")
    if first.size > MAX_MANIFEST_BYTES:
        raise ShippingError(f"{url}: {MANIFEST} is implausibly large ({first.size} bytes)")
    try:
        manifest = json.loads(tar.extractfile(first).read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ShippingError(f"{url}: unreadable {MANIFEST} ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ShippingError(f"{url}: not a tagalign archive (format is not {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ShippingError(f"{url}: archive format version {manifest.get('format_version')}"
                            f"; this tagalign reads version {FORMAT_VERSION}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ShippingError(f"{url}: the manifest lists no files")
    return manifest


def _member_path(member: tarfile.TarInfo, url: str) -> str:
    """The member's path inside the project folder; refuses anything but a regular file
    strictly inside ``project/``."""
    if not member.isfile():
        kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                else "a folder" if member.isdir() else "not a regular file")
        raise ShippingError(f"{url}: refused: {member.name!r} is {kind}")
    name = member.name
    parts = PurePosixPath(name).parts
    if (name.startswith("/") or "\\" in name or len(parts) < 2 or parts[0] != ROOT
            or any(p in ("..", ".", "") for p in parts)):
        raise ShippingError(f"{url}: refused: {name!r} leaves the project folder")
    return "/".join(parts[1:])


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, rel: str,
             expected: dict[str, Any], url: str) -> None:
    src: IO[bytes] = tar.extractfile(member)
    h, size, first = hashlib.sha256(), 0, True
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        while chunk := src.read(CHUNK):
            if first and _looks_pickled(rel, chunk[:512]):
                raise ShippingError(f"{url}: refused: {rel} looks like a pickle")
            first = False
            h.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if first and _looks_pickled(rel, b""):
        raise ShippingError(f"{url}: refused: {rel} looks like a pickle")
    if h.hexdigest() != expected.get("sha256") or size != expected.get("size"):
        raise ShippingError(f"{url}: refused: {rel} does not match its SHA-256 in the "
                            "manifest (damaged or tampered with)")


def download(url: str, into: Path | str | None = None, *, force: bool = False,
             trust: bool = False, storage_options: dict[str, Any] | None = None
             ) -> tuple[Path, dict[str, Any]]:
    """Fetch and verify a project archive into ``into`` (default: the project id in the
    current folder); returns the folder and the manifest. Any failed check raises
    `ShippingError` and leaves an existing folder as it was."""
    if not trust and not is_trusted(url):
        raise UntrustedSourceError(
            f"{url} is not a local source; projects run code paths chosen by their files, "
            "so give --trust to download from it")
    try:
        fh = fsspec.open(url, "rb", **(storage_options or {})).open()
    except FileNotFoundError:
        raise ShippingError(f"archive not found: {url}") from None
    with fh, tarfile.open(fileobj=fh, mode="r|*") as tar:
        manifest = _read_manifest(tar, url)
        pid = str(manifest.get("project") or "")
        if into is None:
            if not pid or "/" in pid or "\\" in pid or pid in (".", ".."):
                raise ShippingError(f"{url}: the manifest names no usable project id; give "
                                    "--into")
            into = Path(pid)
        target = Path(into)
        if target.exists() and not force:
            raise TargetExistsError(f"{target} exists; give --force to replace it (it is kept "
                                "unless the download verifies)")
        expected: dict[str, Any] = manifest["files"]
        with atomic_dir(target) as tmp:
            seen: set[str] = set()
            # `next`, not iteration: iterating a stream starts over with the manifest
            while (member := tar.next()) is not None:
                rel = _member_path(member, url)
                if rel not in expected:
                    raise ShippingError(f"{url}: refused: {rel} is not in the manifest")
                if rel in seen:
                    raise ShippingError(f"{url}: refused: {rel} occurs twice")
                seen.add(rel)
                _extract(tar, member, tmp / rel, rel, expected[rel], url)
            missing = sorted(set(expected) - seen)
            if missing:
                raise ShippingError(f"{url}: refused: files of the manifest missing from the "
                                    f"archive: {', '.join(missing[:5])}")
            _check_project(tmp, manifest, url)
    return target, manifest


def _check_project(folder: Path, manifest: dict[str, Any], url: str) -> None:
    """The unpacked folder loads as the project the manifest describes."""
    if not (folder / CONFIG_NAME).exists():
        raise ShippingError(f"{url}: refused: the archive holds no {CONFIG_NAME}")
    try:
        project = Project.load(folder)
    except (ProjectError, VocabularyMismatchError, OSError, ValueError, KeyError) as exc:
        raise ShippingError(f"{url}: refused: the archived project does not load: "
                            f"{exc}") from None
    fingerprint = (manifest.get("vocabulary") or {}).get("fingerprint")
    if project.vocab.fingerprint != fingerprint:
        raise ShippingError(f"{url}: refused: vocabulary fingerprint "
                            f"{project.vocab.fingerprint} is not the manifest's {fingerprint}")
