"""`upload` and `download` of one project archive through fsspec (see the package
docstring for what is shipped, checked and kept)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import hashlib
import io
import json
import shutil
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any, Literal

import fsspec
from fsspec.core import split_protocol, url_to_fs

from tagalign.errors import (
    NoSpaceError,
    NotFoundError,
    NotTrainedError,
    TagalignError,
    is_no_space,
)
from tagalign.io import atomic_dir, versions
from tagalign.project import CONFIG_NAME, Project, ProjectError
from tagalign.shipping import swap
from tagalign.shipping.checks import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    ROOT,
    ArchiveTooLargeError,
    HeaderRefused,
    Member,
    ShippingError,
    UntrustedSourceError,
    is_shipped,
    looks_pickled,
    member_path,
    read_head,
    read_manifest,
)
from tagalign.vocab import VocabularyMismatchError

LOCAL_PROTOCOLS = {"file", "local", "memory"}
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
CHUNK = 1 << 20
#: what a truncated, damaged or foreign file raises while it is read as a (gzipped) tar;
#: tarfile reads a chain of extended headers (each names the next) by recursion
UNREADABLE = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, RecursionError)


def is_trusted(url: str) -> bool:
    """Local sources are trusted: ``file://``, plain paths and ``memory://``."""
    return (split_protocol(url)[0] or "file") in LOCAL_PROTOCOLS


def archive_url(url: str, project_id: str) -> str:
    """``url`` itself when it names an archive, else ``url/<project_id>.tar.gz``."""
    if url.endswith(ARCHIVE_SUFFIXES):
        return url
    return url.rstrip("/") + f"/{project_id}.tar.gz"


def resolve_url(url: str, into: Path | str | None,
                storage_options: dict[str, Any] | None = None) -> str:
    """The archive `download` reads for the URL `upload` was given: ``url`` itself unless
    it is a folder; of a folder, ``<--into's name>.tar.gz`` when it holds one, else its only
    ``*.tar.gz`` (several: refused, naming them)."""
    if url.endswith(ARCHIVE_SUFFIXES):
        return url
    fs, path = url_to_fs(url, **(storage_options or {}))
    if not fs.isdir(path):
        return url
    names = sorted(n for n in (PurePosixPath(p).name for p in fs.ls(path, detail=False))
                   if n.endswith(".tar.gz"))
    if into is not None and f"{Path(into).name}.tar.gz" in names:
        return archive_url(url, Path(into).name)
    if len(names) == 1:
        return archive_url(url, names[0].removesuffix(".tar.gz"))
    if not names:
        raise ShippingError(f"archive not found: {url} is a folder without a .tar.gz")
    raise ShippingError(f"{url} holds several archives ({', '.join(names[:5])}); give the "
                        "archive's URL")


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read a chunk at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def project_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """``(archive name relative to the folder, path)`` of every file shipped, sorted."""
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not is_shipped(rel.as_posix()):
            continue
        if path.is_symlink():
            raise ShippingError(f"{path} is a symbolic link; archives hold regular files only")
        if path.is_file():
            with open(path, "rb") as fh:
                head = read_head(fh, path.stat().st_size)
            if looks_pickled(rel.as_posix(), head):
                raise ShippingError(f"{path} looks like a pickle; tagalign ships no pickles")
            yield rel.as_posix(), path


def build_manifest(project: Project, files: list[tuple[str, Path]]) -> dict[str, Any]:
    c = project.config
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "project": project.path.name, "name": c.name, "recipe": c.recipe,
        "params": project.params, "vocabulary": c.vocabulary,
        "trained_at": c.trained_at, "versions": versions(),
        "packed": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "files": {rel: {"sha256": file_sha256(p), "size": p.stat().st_size} for rel, p in files},
    }


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    """The store's own errors (no access …) as `ShippingError`, their message kept; a full
    disk as `NoSpaceError`."""
    try:
        yield
    except TagalignError:
        raise
    except OSError as exc:
        if is_no_space(exc):
            raise NoSpaceError.of(exc) from exc
        raise ShippingError(str(exc)) from exc


@_store_errors()
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
    mode: Literal["w|gz", "w|"] = "w|gz" if target.endswith((".gz", ".tgz")) else "w|"
    try:
        with fs.open(partial, "wb") as out, tarfile.open(fileobj=out, mode=mode) as tar:
            _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))
            for rel, p in files:
                info = tar.gettarinfo(str(p), arcname=f"{ROOT}/{rel}")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(p, "rb") as fh:
                    tar.addfile(info, fh)
        fs.mv(partial, path)
    except BaseException as exc:  # no half archive left behind (an earlier one stays)
        with contextlib.suppress(Exception):
            fs.rm(partial)
        if isinstance(exc, Exception) and is_no_space(exc):
            raise NoSpaceError.of(exc, target, "rerun the upload") from exc
        raise
    return target, manifest


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, rel: str,
             expected: dict[str, Any], url: str) -> None:
    """Writes the member, never more than its manifest size, then checks its hash."""
    limit = expected["size"]
    if member.size != limit:
        raise ShippingError(f"{url}: refused: {rel} is {member.size} bytes, {limit} in the "
                            "manifest")
    src: IO[bytes] | None = tar.extractfile(member)
    if src is None:  # not a regular file: member_path refused it already
        raise ShippingError(f"{url}: refused: {rel!r} is not a regular file")
    chunk = read_head(src, limit)
    if looks_pickled(rel, chunk):
        raise ShippingError(f"{url}: refused: {rel} looks like a pickle")
    h, size = hashlib.sha256(), 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        while chunk:
            size += len(chunk)
            if size > limit:
                raise ShippingError(f"{url}: refused: {rel} is larger than the manifest says")
            h.update(chunk)
            out.write(chunk)
            chunk = src.read(min(CHUNK, limit - size + 1))
    if h.hexdigest() != expected["sha256"] or size != limit:
        raise ShippingError(f"{url}: refused: {rel} does not match its SHA-256 in the "
                            "manifest (damaged or tampered with)")


def _rerun(target: Path) -> str:
    """How a download stopped by a full disk continues."""
    return "rerun the download" + (f" (the project in {target} is kept as it was)"
                                   if target.exists() else "")


def _check_space(manifest: dict[str, Any], target: Path, url: str) -> None:
    """The manifest's files fit on the target's file system (checked before writing; the
    blocks each file takes are more, so the writing may still find the disk full)."""
    need = sum(entry["size"] for entry in manifest["files"].values())
    folder = target.absolute().parent
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if need > free:
        raise ArchiveTooLargeError(
            target, _rerun(target), f"the files of {url} need {need} bytes, {free} are free "
            f"in {folder}")


def _unpack(tar: tarfile.TarFile, folder: Path, manifest: dict[str, Any], url: str) -> None:
    expected: dict[str, Any] = manifest["files"]
    seen: set[str] = set()
    # `next`, not iteration: iterating a stream starts over with the manifest
    while (member := tar.next()) is not None:
        rel = member_path(member, url)
        if rel not in expected:
            raise ShippingError(f"{url}: refused: {rel} is not in the manifest")
        if rel in seen:
            raise ShippingError(f"{url}: refused: {rel} occurs twice")
        seen.add(rel)
        _extract(tar, member, folder / rel, rel, expected[rel], url)
    missing = sorted(set(expected) - seen)
    if missing:
        raise ShippingError(f"{url}: refused: files of the manifest missing from the "
                            f"archive: {', '.join(missing[:5])}")
    _check_project(folder, manifest, url)


def _target(manifest: dict[str, Any], into: Path | str | None, url: str) -> Path:
    if into is not None:
        return Path(into)
    pid = str(manifest.get("project") or "")
    if not pid or any(c in pid for c in "/\\\0") or pid in (".", ".."):
        raise ShippingError(f"{url}: the manifest names no usable project id; give --into")
    return Path(pid)


@_store_errors()
def download(url: str, into: Path | str | None = None, *, force: bool = False,
             trust: bool = False, storage_options: dict[str, Any] | None = None,
             wait: float = 0.0) -> tuple[Path, dict[str, Any]]:
    """Fetch and verify a project archive into ``into`` (default: the project id in the
    current folder); returns the folder and the manifest. ``url`` is the archive or the
    folder URL given to `upload` (`resolve_url`). Any failed check raises `ShippingError`
    and leaves an existing folder as it was; ``force`` replaces a project folder, keeping
    its feedback store (`tagalign.shipping.swap`). Another download into the folder
    running, this one waits up to ``wait`` seconds, then raises `FolderBusyError`."""
    if not trust and not is_trusted(url):
        raise UntrustedSourceError(
            f"{url} is not a local source; projects run code paths chosen by their files, "
            "so give --trust to download from it")
    url = resolve_url(url, into, storage_options)
    try:
        fh = fsspec.open(url, "rb", **(storage_options or {})).open()
    except FileNotFoundError:
        raise ShippingError(f"archive not found: {url}") from None
    try:
        with fh, tarfile.open(fileobj=fh, mode="r|*", tarinfo=Member) as tar:
            manifest = read_manifest(tar, url)
            target = _target(manifest, into, url)
            with swap.downloading(target, wait):
                _fetch(tar, manifest, target, force, url)
    except HeaderRefused as exc:
        raise ShippingError(f"{url}: refused: {exc}") from None
    except UNREADABLE as exc:
        raise ShippingError(f"{url}: damaged, cut short or not a tar archive "
                            f"({exc or type(exc).__name__}); fetch or upload it again") from None
    return target, manifest


def _fetch(tar: tarfile.TarFile, manifest: dict[str, Any], target: Path, force: bool,
           url: str) -> None:
    """The archive's files verified into ``incoming(target)``, then swapped in (under
    `swap.downloading`)."""
    swap.recover(target)
    swap.check_replaceable(target, force)
    _check_space(manifest, target, url)
    try:
        with atomic_dir(swap.incoming(target)) as tmp:
            _unpack(tar, tmp, manifest, url)
    except NoSpaceError as exc:  # named by the folder it was for
        raise NoSpaceError.of(exc, target, _rerun(target)) from exc
    swap.replace(target)


def _check_project(folder: Path, manifest: dict[str, Any], url: str) -> None:
    """The unpacked folder loads as the project the manifest describes."""
    if not (folder / CONFIG_NAME).exists():
        raise ShippingError(f"{url}: refused: the archive holds no {CONFIG_NAME}")
    try:
        project = Project.load(folder)
    except (ProjectError, VocabularyMismatchError, OSError, ValueError, KeyError) as exc:
        raise ShippingError(f"{url}: refused: the archived project does not load: "
                            f"{exc}") from None
    except Exception as exc:  # any file of a foreign archive can break a load its own way
        raise ShippingError(f"{url}: refused: the archived project does not load: "
                            f"{type(exc).__name__}: {exc}") from None
    fingerprint = (manifest.get("vocabulary") or {}).get("fingerprint")
    if project.vocab.fingerprint != fingerprint:
        raise ShippingError(f"{url}: refused: vocabulary fingerprint "
                            f"{project.vocab.fingerprint} is not the manifest's {fingerprint}")
