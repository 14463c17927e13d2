"""Ship a trained project: one tar archive per project, to and from any fsspec store.

`upload` writes ``manifest.json`` first, then the project's files under ``project/``; the
manifest holds the SHA-256 and size of every file, the tagalign and library versions, the
recipe and the vocabulary fingerprint. `fsspec` opens the URL, so ``file://``,
``memory://``, ``s3://`` (``pip install 'tagalign[s3]'``) and ``hf://`` (Hugging Face Hub,
through huggingface_hub's file system) need no code of ours per store. A URL that names no
archive is a folder: `upload` writes ``URL/<project id>.tar.gz`` there, and `download` of
the same URL reads it (`archive.resolve_url`).

`download` streams the archive and refuses it — leaving an existing project untouched —
unless every entry is a regular file under ``project/`` that stays inside the target
folder, is one `upload` ships, is listed in the manifest with the size it has (checked
before a byte is written, and the writing stops there) and the hash it has, the manifest
lists no file the archive lacks and the disk has room for all it lists (else, as when the
writing finds the disk full, `tagalign.errors.NoSpaceError`); pickles are
refused on both sides (a safetensors header is recognised first). A truncated, damaged or
foreign file is a `ShippingError` naming it. The files are written into a temporary
sibling folder that replaces the target only after all checks passed; ``force`` replaces
only a project folder and moves its feedback store into the new version (`swap`). One
download into a folder runs at a time, and a swap waits for the servers loading the
folder (`swap`'s locks, which a reload takes shared: `swap.read_whole`).

Not shipped: ``work/`` (an interrupted training's phases), the feedback store
(``feedback.sqlite``: librarians' decisions stay where they were made) and hidden
temporary files.

Trust (as Annif's ``--trust-repo``): a local source (``file://``, a plain path,
``memory://``) is trusted; any other store needs ``trust=True``, since a project's
files decide what the server runs.
"""

from tagalign.shipping.archive import (
    ARCHIVE_SUFFIXES,
    archive_url,
    build_manifest,
    download,
    is_trusted,
    project_files,
    resolve_url,
    upload,
)
from tagalign.shipping.checks import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    NOT_SHIPPED,
    ShippingError,
    TargetExistsError,
    UntrustedSourceError,
    is_safetensors,
    looks_pickled,
)

__all__ = [
    "ARCHIVE_SUFFIXES", "FORMAT", "FORMAT_VERSION", "MANIFEST", "NOT_SHIPPED",
    "ShippingError", "TargetExistsError", "UntrustedSourceError", "archive_url",
    "build_manifest", "download", "is_safetensors", "is_trusted", "looks_pickled",
    "project_files", "resolve_url", "upload",
]
