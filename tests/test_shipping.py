"""Shipping a trained project (`tagalign upload` / `download`) through fsspec: a project
uploaded to file:// (and memory://) and downloaded elsewhere suggests identically;
tampered, traversing, linked, incomplete, padded and pickled archives are refused and
leave the existing project untouched."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile

import fsspec
import pytest
from typer.testing import CliRunner

from suggesting import suggestions
from tagalign.cli import app
from tagalign.project import Project
from tagalign.shipping import (
    MANIFEST,
    ShippingError,
    UntrustedSourceError,
    download,
    is_trusted,
    upload,
)
from tiny_models import tiny_records, tiny_vocab

QUERIES = tiny_records(12, seed=9)


@pytest.fixture(scope="module")
def trained(tiny_hybrid, tmp_path_factory):
    path = shutil.copytree(tiny_hybrid, tmp_path_factory.mktemp("ship") / "tiny-hybrid")
    (path / "feedback.sqlite").write_bytes(b"librarians' decisions stay here")
    return path


def _ranked(project: Project) -> list[list[tuple[str, float]]]:
    return [[(s.id, s.score) for s in row] for row in suggestions(project, QUERIES, limit=8)]


def test_uploaded_to_file_and_downloaded_elsewhere_suggests_identically(trained, tmp_path):
    store = tmp_path / "store"
    url, manifest = upload(trained, f"file://{store}/")
    assert url == f"file://{store}/tiny-hybrid.tar.gz"
    assert (store / "tiny-hybrid.tar.gz").exists()
    assert not list(store.glob("*.partial"))
    assert "feedback.sqlite" not in manifest["files"]  # stays where it was made
    assert manifest["recipe"] == "hybrid" and manifest["versions"]["numpy"]
    assert manifest["vocabulary"]["fingerprint"] == tiny_vocab().fingerprint
    for rel, entry in manifest["files"].items():
        assert hashlib.sha256((trained / rel).read_bytes()).hexdigest() == entry["sha256"]

    target, got = download(url, tmp_path / "elsewhere")
    assert target == tmp_path / "elsewhere" and got == manifest
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")
                  if p.is_file()) == sorted(manifest["files"])
    before = _ranked(Project.load(trained))
    assert before and all(before)
    assert _ranked(Project.load(target)) == before


def test_memory_file_system_round_trip_and_force(trained, tmp_path):
    url, _ = upload(trained, "memory://models/tiny.tar")
    target = tmp_path / "proj"
    download(url, target)
    with pytest.raises(ShippingError, match="exists; give --force"):
        download(url, target)
    (target / "stale.txt").write_text("from an older version", encoding="utf-8")
    download(url, target, force=True)
    assert not (target / "stale.txt").exists()  # replaced as a whole
    assert _ranked(Project.load(target)) == _ranked(Project.load(trained))


# -- refused archives -------------------------------------------------------------------
def _members(url: str) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with fsspec.open(url, "rb") as fh, tarfile.open(fileobj=fh, mode="r:*") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]


def _write(url: str, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> str:
    with fsspec.open(url, "wb") as fh, tarfile.open(fileobj=fh, mode="w") as tar:
        for info, data in members:
            info = tarfile.TarInfo(info.name) if data is not None else info
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return url


def _entry(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


@pytest.fixture(scope="module")
def archive(trained):
    url, manifest = upload(trained, "memory://refuse/tiny-hybrid.tar.gz")
    return _members(url), manifest


@pytest.fixture
def existing(trained, tmp_path):
    """A downloaded project that every refused download must leave as it is."""
    url, _ = upload(trained, "memory://existing/ok.tar")
    target, _ = download(url, tmp_path / "current")
    (target / "marker.txt").write_text("untouched", encoding="utf-8")
    return target


def _refused(members, existing, match: str) -> None:
    url = _write("memory://refuse/bad.tar", members)
    before = sorted(p.relative_to(existing) for p in existing.rglob("*"))
    with pytest.raises(ShippingError, match=match):
        download(url, existing, force=True)
    assert sorted(p.relative_to(existing) for p in existing.rglob("*")) == before
    assert (existing / "marker.txt").read_text(encoding="utf-8") == "untouched"
    assert not [p for p in existing.parent.iterdir() if p.name.startswith(".")
                and not p.name.endswith(".lock")]  # no debris


def test_tampered_file_is_refused(archive, existing):
    members, _ = archive
    i = next(i for i, (m, _) in enumerate(members) if m.name.endswith("recipe.json"))
    info, data = members[i]
    tampered = data.replace(b'"hybrid"', b'"lexica"')  # same size: the hash must tell
    assert tampered != data and len(tampered) == len(data)
    _refused([*members[:i], (info, tampered), *members[i + 1:]], existing,
             r"recipe.json does not match its SHA-256")


def test_path_traversal_entry_is_refused(archive, existing, tmp_path):
    members, _ = archive
    evil = _entry("project/../../evil.txt", b"escaped")
    _refused([*members[:2], evil, *members[2:]], existing, r"'project/../../evil.txt' "
             "leaves the project folder")
    assert not (existing.parent.parent / "evil.txt").exists()
    _refused([*members, _entry("/etc/evil", b"x")], existing, "leaves the project folder")


def test_link_missing_extra_and_pickle_entries_are_refused(archive, existing):
    members, manifest = archive
    link = tarfile.TarInfo("project/model/link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    _refused([*members, (link, None)], existing, "'project/model/link' is a symbolic link")
    _refused(members[:-1], existing, "files of the manifest missing from the archive")
    _refused([*members, _entry("project/extra.json", b"{}")], existing,
             "extra.json is not in the manifest")
    # a pickle listed in the manifest with its true hash is refused all the same
    pickled = b"\x80\x04\x95" + b"\x00" * 20
    listed = {**manifest, "files": {**manifest["files"], "model/state.bin": {
        "sha256": hashlib.sha256(pickled).hexdigest(), "size": len(pickled)}}}
    _refused([_entry(MANIFEST, json.dumps(listed).encode()), *members[1:],
              _entry("project/model/state.bin", pickled)], existing, "looks like a pickle")
    _refused(members[1:], existing, "manifest.json must come first")


def test_a_pickle_in_the_project_is_never_uploaded(trained, tmp_path):

    copy = tmp_path / "copy"
    shutil.copytree(trained, copy)
    (copy / "model" / "extra.pkl").write_bytes(b"\x80\x04N.")
    with pytest.raises(ShippingError, match="looks like a pickle"):
        upload(copy, "memory://never/")
    assert not fsspec.filesystem("memory").exists("/never/copy.tar.gz")


def test_remote_sources_need_trust(tmp_path):
    assert is_trusted("file:///srv/x.tar") and is_trusted("x.tar") and \
        is_trusted("memory://x.tar")
    for url in ("s3://bucket/p.tar.gz", "hf://datasets/org/repo/p.tar.gz",
                "https://example.org/p.tar"):
        assert not is_trusted(url)
        with pytest.raises(UntrustedSourceError, match="give --trust"):
            download(url, tmp_path / "p")  # refused before anything is fetched
    assert not (tmp_path / "p").exists()


def test_cli_upload_and_download(trained, tmp_path):
    runner = CliRunner()
    up = runner.invoke(app, ["upload", str(trained), f"file://{tmp_path}/store/"])
    assert up.exit_code == 0, up.output
    url = up.stdout.strip()
    assert url == f"file://{tmp_path}/store/tiny-hybrid.tar.gz"
    down = runner.invoke(app, ["download", url, "--into", str(tmp_path / "p")])
    assert down.exit_code == 0, down.output
    assert down.stdout.strip() == str(tmp_path / "p")
    again = runner.invoke(app, ["download", url, "--into", str(tmp_path / "p")])
    assert again.exit_code == 1 and "exists; give --force" in again.output
    remote = runner.invoke(app, ["download", "s3://bucket/p.tar.gz"])
    assert remote.exit_code == 1 and "give --trust" in remote.output
