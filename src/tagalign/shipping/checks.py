"""What an archive may hold: the files `upload` ships, no pickles, a manifest that lists
every file with its SHA-256 and size, members that are regular files strictly inside
``project/``, and headers no larger than `MAX_HEADER_BYTES` (`Member`).

No member is extracted by `tarfile` (``extract``, even with ``filter="data"``, would write
links and folders): `tagalign.shipping.archive` writes the bytes of each regular file it
accepted itself, so a link, a device, a fifo or a name leaving the folder is refused
before anything is written.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import PurePosixPath
from typing import IO, Any

from tagalign.errors import ConflictError, InputError, NoSpaceError, PermissionDeniedError
from tagalign.project import WORK_DIR

FORMAT = "tagalign-archive"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ROOT = "project"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
#: the feedback store's file and SQLite's side files (journal, write-ahead log, its index)
FEEDBACK_FILES = ("feedback.sqlite", "feedback.sqlite-journal", "feedback.sqlite-wal",
                  "feedback.sqlite-shm")
#: top-level entries of a project folder never shipped (see the package docstring)
NOT_SHIPPED = {WORK_DIR, *FEEDBACK_FILES}
PICKLE_SUFFIXES = {".pkl", ".pickle", ".joblib", ".pt", ".pth", ".ckpt"}
#: bytes of a file read to recognise it (more for a safetensors header, see `read_head`)
HEAD_BYTES = 512
#: the safetensors format's own limit on its JSON header
SAFETENSORS_MAX_HEADER = 100_000_000
#: the largest extended header (pax, GNU long name) read: `upload` writes a few hundred
#: bytes; tarfile reads one into memory whole, so a few bytes of gzip could announce GBs
MAX_HEADER_BYTES = 1 << 20
EXTENDED_HEADERS = {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                    tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}


class ShippingError(InputError):
    """An archive cannot be written, or is refused."""


class ArchiveTooLargeError(ShippingError, NoSpaceError):
    """The files an archive's manifest lists need more than the target's free space:
    refused before a byte is written (a manifest that lies about sizes too). Worded as
    every full disk is (`NoSpaceError`)."""


class TargetExistsError(ShippingError, ConflictError):
    """The folder a download would write holds something (``force`` replaces a project)."""


class UntrustedSourceError(PermissionDeniedError, ShippingError):
    """A download from a remote store without ``trust``."""


class FolderBusyError(ShippingError, ConflictError):
    """Another download writes the folder, or servers load it for longer than a swap
    waits (`tagalign.shipping.swap`)."""


class HeaderRefused(ShippingError):
    """A member header refused while tarfile reads it (`Member`; tarfile lets it through
    as it is); `download` adds the archive's URL."""


class Member(tarfile.TarInfo):
    """A member header as tarfile reads it (``tarfile.open(tarinfo=Member)``), refusing
    before tarfile acts on them an extended header larger than `MAX_HEADER_BYTES` (tarfile
    would read it into memory whole) and sparse files (their maps are read from the
    stream, as long as it says; `upload` never writes one). `_proc_member` is tarfile's
    documented hook for subclasses."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in EXTENDED_HEADERS and self.size > MAX_HEADER_BYTES:
            raise HeaderRefused(f"an extended tar header of {self.size} bytes (at most "
                                f"{MAX_HEADER_BYTES} read)")
        # typeshed leaves out tarfile's private hook
        return super()._proc_member(tar)  # type: ignore[misc]

    def _refuse_sparse(self, *_: Any) -> None:
        raise HeaderRefused(f"{self.name!r} is a sparse file; upload writes none")

    # a GNU sparse member, and the pax forms of one (GNU tar's formats 0.0, 0.1 and 1.0)
    _proc_sparse = _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = \
        _refuse_sparse


def is_shipped(rel: str) -> bool:
    """Whether `upload` ships the file at ``rel`` (relative to the project folder)."""
    parts = PurePosixPath(rel).parts
    return bool(parts) and parts[0] not in NOT_SHIPPED and \
        not any(p.startswith(".") for p in parts)


def _safetensors_length(head: bytes) -> int:
    """The header length a safetensors file starts with (8 bytes, little-endian), or 0
    when ``head`` cannot start one (the JSON header is an object: ``{`` follows)."""
    if len(head) < 10 or head[8:9] != b"{":
        return 0
    n = int.from_bytes(head[:8], "little")
    return n if 2 <= n <= SAFETENSORS_MAX_HEADER else 0


def is_safetensors(head: bytes) -> bool:
    """``head`` starts with a whole safetensors header: its length N as a little-endian
    u64, then N bytes of a JSON object (padded with spaces)."""
    n = _safetensors_length(head)
    if not n or len(head) < 8 + n:
        return False
    try:
        return isinstance(json.loads(head[8:8 + n].decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return False


def read_head(fh: IO[bytes], limit: int) -> bytes:
    """The first bytes of a file of ``limit`` bytes that `looks_pickled` needs: 512, or
    the whole header of what may be a safetensors file."""
    head = fh.read(min(HEAD_BYTES, limit))
    n = _safetensors_length(head)
    if n and len(head) < 8 + n <= limit:
        head += fh.read(8 + n - len(head))
    return head


def looks_pickled(name: str, head: bytes) -> bool:
    """A pickle by name or by its first bytes (protocol 2+ starts with 0x80 and the
    protocol number; torch's zip checkpoints hold a ``data.pkl``). A safetensors file
    whose header length is 0x280, 0x380, … starts with those bytes too: a valid
    safetensors header is recognised first."""
    if PurePosixPath(name).suffix.lower() in PICKLE_SUFFIXES:
        return True
    if is_safetensors(head):
        return False
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    return head.startswith(b"PK\x03\x04") and b".pkl" in head


def read_manifest(tar: tarfile.TarFile, url: str) -> dict[str, Any]:
    """The archive's first member, checked: every file listed is one `upload` ships, with
    a SHA-256 and a size."""
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isfile():
        raise ShippingError(f"{url}: not a tagalign archive ({MANIFEST} must come first)")
    if first.size > MAX_MANIFEST_BYTES:
        raise ShippingError(f"{url}: {MANIFEST} is implausibly large ({first.size} bytes)")
    src = tar.extractfile(first)
    if src is None:  # not a regular file: refused above already
        raise ShippingError(f"{url}: not a tagalign archive ({MANIFEST} must come first)")
    try:
        manifest = json.loads(src.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ShippingError(f"{url}: unreadable {MANIFEST} ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ShippingError(f"{url}: not a tagalign archive (format is not {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ShippingError(f"{url}: archive format version {manifest.get('format_version')}"
                            f"; this tagalign reads version {FORMAT_VERSION}")
    for key in ("vocabulary", "versions"):
        if not isinstance(manifest.get(key), dict):
            raise ShippingError(f"{url}: refused: the manifest's {key} is not an object")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ShippingError(f"{url}: the manifest lists no files")
    for rel, entry in files.items():
        if not is_shipped(rel):
            raise ShippingError(f"{url}: refused: {rel} is never shipped (upload leaves out "
                                f"{WORK_DIR}/, the feedback store and hidden files)")
        size = entry.get("size") if isinstance(entry, dict) else None
        if type(size) is not int or size < 0 or not isinstance(entry.get("sha256"), str):
            raise ShippingError(f"{url}: refused: the manifest gives {rel} no size and "
                                "SHA-256")
    return manifest


def member_path(member: tarfile.TarInfo, url: str) -> str:
    """The member's path inside the project folder; refuses anything but a regular file
    strictly inside ``project/``, and what `upload` never ships."""
    if not member.isfile():
        kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                else "a folder" if member.isdir() else "not a regular file")
        raise ShippingError(f"{url}: refused: {member.name!r} is {kind}")
    name = member.name
    parts = PurePosixPath(name).parts
    if (name.startswith("/") or "\\" in name or "\0" in name or len(parts) < 2
            or parts[0] != ROOT or any(p in ("..", ".", "") for p in parts)):
        raise ShippingError(f"{url}: refused: {name!r} leaves the project folder")
    rel = "/".join(parts[1:])
    if not is_shipped(rel):
        raise ShippingError(f"{url}: refused: {rel} is never shipped")
    return rel
