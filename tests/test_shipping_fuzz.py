"""Archives made to harm `tagalign download` (issue 46): members with ``..``, absolute
paths, links pointing anywhere, devices, fifos, sparse files, headers announcing
gigabytes, chains of headers, names with NUL bytes, and manifests that lie about sizes and
hashes. Each is refused with a `ShippingError` (one line on the CLI, no traceback), writes
nothing outside its folder, and leaves the project it would replace as it was.

Hypothesis runs derandomized (the same examples every run) with a bounded example count.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.shipping import MANIFEST, ShippingError, download, upload
from tagalign.shipping.checks import MAX_HEADER_BYTES

FUZZ = settings(max_examples=40, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])
#: where an absolute member name would land; nothing may ever appear there
ESCAPE = Path("/tmp/tagalign-fuzz-escape")


@pytest.fixture(scope="module")
def shipped(tiny_hybrid) -> tuple[list[tuple[str, bytes]], dict]:
    """The tiny hybrid's archive as (name, bytes) members, and its manifest."""
    url, manifest = upload(tiny_hybrid, "memory://fuzz-source/tiny.tar")
    with fsspec.open(url, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar]
    return members, manifest


@pytest.fixture(scope="module")
def world(shipped, tmp_path_factory) -> tuple[Path, Path]:
    """``root`` (every place a member with up to 5 ``..`` could reach from the download's
    folders) and, deep inside it, the project a refused download must keep."""
    root = tmp_path_factory.mktemp("fuzz")
    target = root / "a" / "b" / "c" / "models" / "current"
    members, _ = shipped
    download(_store(members, "memory://fuzz-source/ok.tar"), target)
    (target / "feedback.sqlite").write_bytes(b"librarians' decisions")
    return root, target


def _store(members: list[tuple[tarfile.TarInfo | str, bytes | None]], url: str,
           gz: bool = False) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT,
                      **({"compresslevel": 1} if gz else {})) as tar:
        for info, data in members:
            if isinstance(info, str):
                info = tarfile.TarInfo(info)
                info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data) if data is not None and info.size else None)
    with fsspec.open(url, "wb") as fh:
        fh.write(buf.getvalue())
    return url


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry below ``root`` but the download locks: kind, size and content hash."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            if name.endswith(".lock"):
                continue
            st_ = path.lstat()
            digest = (hashlib.sha256(path.read_bytes()).hexdigest()
                      if stat.S_ISREG(st_.st_mode) else None)
            out[path.relative_to(root).as_posix()] = (stat.S_IFMT(st_.st_mode),
                                                     st_.st_size, digest)
    return out


def _listing(manifest: dict, files: dict) -> tuple[str, bytes]:
    return MANIFEST, json.dumps({**manifest, "files": files}).encode()


def _refused_everywhere(root: Path, target: Path, url: str, match: str = "") -> ShippingError:
    """Downloads ``url`` over ``target``: refused, nothing below ``root`` changed."""
    before = _tree(root)
    with pytest.raises(ShippingError, match=match) as info:
        download(url, target, force=True)
    assert _tree(root) == before
    assert not ESCAPE.exists()
    return info.value


# -- Hypothesis: one member of any kind and name, a manifest that may lie ------------------
KINDS = [tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.LNKTYPE, tarfile.SYMTYPE, tarfile.CHRTYPE,
         tarfile.BLKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE,
         tarfile.GNUTYPE_SPARSE, tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, b"Z"]
PARTS = ["project", "model", "ranker", "..", ".", "", "x", "feedback.sqlite", "work",
         ".hidden", "a\0b", "é", "a" * 300, "project.json", "manifest.json"]
names = st.one_of(
    st.lists(st.sampled_from(PARTS), min_size=1, max_size=5).map("/".join),
    st.sampled_from([f"{ESCAPE}/x", "/etc/passwd", "project\\..\\..\\x", "project/model/",
                     "./project/model/x", "project//model/x"]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12).filter(
        lambda s: not s.startswith("/")))
links = st.sampled_from(["", "/etc/passwd", "../../../escaped", "project/project.json",
                         "project.json", f"{ESCAPE}/x"])
LIES = ["none", "bigger", "smaller", "hash", "dropped", "phantom", "huge"]


def _lie(files: dict, how: str, which: int) -> dict:
    files = {rel: dict(e) for rel, e in files.items()}
    rel = sorted(files)[which % len(files)]
    if how == "bigger":
        files[rel]["size"] += 1
    elif how == "smaller" and files[rel]["size"]:
        files[rel]["size"] -= 1
    elif how == "hash":
        files[rel]["sha256"] = hashlib.sha256(b"another file").hexdigest()
    elif how == "dropped":
        del files[rel]
    elif how == "phantom":
        files["model/phantom.json"] = {"sha256": hashlib.sha256(b"").hexdigest(), "size": 0}
    elif how == "huge":
        files[rel]["size"] = 1 << 50
    return files


@FUZZ
@given(name=names, kind=st.sampled_from(KINDS), link=links, data=st.binary(max_size=40),
       listed=st.sampled_from(["no", "true", "size", "hash"]), at=st.integers(1, 60),
       lie=st.sampled_from(LIES), which=st.integers(0, 100), gz=st.booleans(),
       pax=st.booleans())
def test_any_member_and_any_lie_is_refused_cleanly(shipped, world, name, kind, link, data,
                                                   listed, at, lie, which, gz, pax):
    members, manifest = shipped
    root, target = world
    files = _lie(manifest["files"], lie, which)
    rel = name.removeprefix("project/")
    if listed != "no":
        files[rel] = {"sha256": hashlib.sha256(data if listed != "hash" else b"?").hexdigest(),
                      "size": len(data) + (listed == "size")}
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    if pax:  # the name in a pax header: kept whole (a ustar field ends at a NUL)
        info.pax_headers = {"path": name, "linkpath": link}
    regular = kind in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.XHDTYPE,
                       tarfile.GNUTYPE_LONGNAME)
    info.size = len(data) if regular else 0
    body = [*members[1:]]
    body.insert(min(at, len(body)), (info, data if regular else None))
    try:
        url = _store([_listing(manifest, files), *body], "memory://fuzz/a.tar", gz)
    except (ValueError, UnicodeError):  # a name tarfile itself cannot write
        return
    # harmless only when it is a regular file where upload would put one, told truly
    harmless = (kind in (tarfile.REGTYPE, tarfile.AREGTYPE) and listed == "true"
                and lie == "none" and name == f"project/{rel}"
                and name.count("/") >= 1 and "\0" not in name)
    before = _tree(root)
    try:
        download(url, target, force=True)
    except ShippingError:
        assert _tree(root) == before  # the project kept, nothing written elsewhere
    else:
        assert harmless, f"accepted {name!r} ({kind!r}, {listed}, {lie})"
        assert {k: v for k, v in _tree(root).items()
                if not k.startswith("a/b/c/models/current")} == \
            {k: v for k, v in before.items() if not k.startswith("a/b/c/models/current")}
        assert (target / rel).read_bytes() == data
        assert (target / "feedback.sqlite").read_bytes() == b"librarians' decisions"
    assert not ESCAPE.exists()
    assert not [p for p in target.parent.iterdir()
                if p.name.startswith(".") and not p.name.endswith(".lock")]


# -- headers that would make tarfile read gigabytes, or recurse --------------------------
def _header(kind: bytes, size: int, name: str = "././@LongLink") -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.GNU_FORMAT)  # GNU: sizes past 8 GB in base 256


def _unended(members: list[tuple[str, bytes]]) -> bytes:
    """The members as a tar without its end blocks (so more headers can follow)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        end = tar.offset
    return buf.getvalue()[:end]


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME,
                                  tarfile.GNUTYPE_LONGLINK])
def test_an_extended_header_announcing_gigabytes_is_refused_unread(shipped, world, kind):
    """tarfile reads an extended header into memory whole: 1 TB announced (its data cut
    short here; a real bomb is a few MB of gzip), and one just over the limit, before the
    manifest or after it."""
    root, target = world
    members, _ = shipped
    for size in (1 << 40, MAX_HEADER_BYTES + 1):
        bad = _header(kind, size) + b"\0" * min(size, MAX_HEADER_BYTES + 512)
        for data in (bad + _unended(members[:2]), _unended(members[:2]) + bad):
            with fsspec.open("memory://fuzz/h.tar", "wb") as fh:
                fh.write(data)
            _refused_everywhere(root, target, "memory://fuzz/h.tar",
                                f"refused: an extended tar header of {size} bytes")


def test_sparse_members_are_refused(shipped, world):
    root, target = world
    members, manifest = shipped
    gnu = tarfile.TarInfo("project/model/sparse.bin")
    gnu.type = tarfile.GNUTYPE_SPARSE
    _refused_everywhere(root, target, _store([members[0], (gnu, None), *members[1:]],
                                             "memory://fuzz/s.tar"), "sparse file")
    # GNU tar's pax sparse format 1.0: its map is read from the data, as long as it says
    pax = tarfile.TarInfo("project/model/sparse.bin")
    pax.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                       "GNU.sparse.realsize": "10"}
    sparse_map = b"999999999\n" * 60
    pax.size = len(sparse_map)
    _refused_everywhere(root, target, _store([members[0], (pax, sparse_map),
                                              *members[1:]], "memory://fuzz/s.tar"),
                        "sparse file")


def test_a_chain_of_headers_is_a_clear_error(shipped, world):
    root, target = world
    members, _ = shipped
    chain = b"".join(_header(tarfile.XHDTYPE, 512, "././@PaxHeader") + b"\0" * 512
                     for _ in range(3000))  # tarfile reads each next header recursively
    with fsspec.open("memory://fuzz/c.tar", "wb") as fh:
        fh.write(chain)
    _refused_everywhere(root, target, "memory://fuzz/c.tar", "damaged")


# -- what the manifest claims --------------------------------------------------------------
def test_a_name_with_a_nul_byte_is_refused(shipped, world):
    root, target = world
    members, manifest = shipped
    data = b"{}"
    files = {**manifest["files"], "model/a\0b.json": {
        "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}}
    info = tarfile.TarInfo("project/model/a.json")
    info.size, info.pax_headers = len(data), {"path": "project/model/a\0b.json"}  # kept whole
    _refused_everywhere(root, target, _store(
        [_listing(manifest, files), *members[1:], (info, data)], "memory://fuzz/n.tar"),
        "leaves the project folder")


@pytest.mark.parametrize("key", ["vocabulary", "versions"])
def test_a_manifest_of_the_wrong_shape_is_refused(shipped, world, key):
    root, target = world
    members, manifest = shipped
    bad = json.dumps({**manifest, key: "not an object"}).encode()
    url = _store([(MANIFEST, bad), *members[1:]], "memory://fuzz/m.tar")
    _refused_everywhere(root, target, url, f"manifest's {key} is not an object")
    res = CliRunner().invoke(app, ["download", url, "--into", str(target), "--force"])
    assert res.exit_code == 1 and "error:" in res.output
    assert isinstance(res.exception, SystemExit)  # no traceback


def test_a_project_file_that_breaks_loading_is_refused(shipped, world):
    """project.json and the manifest agree, so only loading it can tell."""
    root, target = world
    members, manifest = shipped
    config = json.dumps({"format": "tagalign-project", "recipe": "hybrid",
                         "vocabulary": ["not", "an", "object"]}).encode()
    files = {**manifest["files"], "project.json": {
        "sha256": hashlib.sha256(config).hexdigest(), "size": len(config)}}
    body = [(n, config if n == "project/project.json" else d) for n, d in members[1:]]
    _refused_everywhere(root, target, _store([_listing(manifest, files), *body],
                                             "memory://fuzz/p.tar"), "does not load")
