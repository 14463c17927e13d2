"""Shipping without data loss (`tagalign download --force` keeps a project's feedback store
and refuses a folder that is no project; an upload's URL downloads) and archives that
cannot harm the machine (sizes checked before writing, only what `upload` ships accepted,
truncated archives a clear error, safetensors headers not mistaken for pickles)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import sqlite3
import struct
import tarfile

import fsspec
import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.project import Project
from tagalign.shipping import (
    MANIFEST,
    ShippingError,
    TargetExistsError,
    download,
    upload,
)


@pytest.fixture(scope="module")
def trained(tiny_hybrid):
    """The shared tiny hybrid (read-only: the tests copy what they change)."""
    return tiny_hybrid


@pytest.fixture(scope="module")
def archive(trained, tmp_path_factory):
    url, manifest = upload(trained, f"file://{tmp_path_factory.mktemp('store')}/")
    return url, manifest


def _decisions(db) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT what FROM d ORDER BY rowid")]


# -- 1. an update keeps the feedback store ---------------------------------------------
def test_force_update_carries_the_feedback_store_over_a_running_server(archive, tmp_path):
    url, _ = archive
    target, _ = download(url, tmp_path / "proj")
    # a server: WAL journal, no automatic checkpoint, its connection open throughout
    server = sqlite3.connect(target / "feedback.sqlite", isolation_level=None)
    server.execute("PRAGMA journal_mode=WAL")
    server.execute("PRAGMA wal_autocheckpoint=0")
    server.execute("CREATE TABLE d (what TEXT)")
    server.execute("INSERT INTO d VALUES ('accept 4015065-3')")
    assert (target / "feedback.sqlite-wal").stat().st_size > 0  # not yet in the main file
    (target / "work" / "phase-1").mkdir(parents=True)

    download(url, target, force=True)

    assert _decisions(target / "feedback.sqlite") == ["accept 4015065-3"]
    assert not (target / "work").exists()  # an interrupted training of the old version
    server.execute("INSERT INTO d VALUES ('reject 4025741-1')")  # still running
    server.close()
    assert _decisions(target / "feedback.sqlite") == ["accept 4015065-3", "reject 4025741-1"]
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")
                and not p.name.endswith(".lock")]  # no debris


def test_a_swap_cut_short_is_completed_by_the_next_download(archive, tmp_path, monkeypatch):
    from tagalign.shipping import swap

    url, _ = archive
    target, _ = download(url, tmp_path / "proj")
    (target / "feedback.sqlite").write_bytes(b"decisions")

    def crash(src, dst):
        raise KeyboardInterrupt  # the power cut between "old aside" and "new in"

    real = swap._rename_in
    monkeypatch.setattr(swap, "_rename_in", crash)
    with pytest.raises(KeyboardInterrupt):
        download(url, target, force=True)
    assert not target.exists()  # neither in place: what a crash here leaves
    monkeypatch.setattr(swap, "_rename_in", real)

    with pytest.raises(TargetExistsError):  # the rerun first finishes the swap
        download(url, target)
    assert (target / "feedback.sqlite").read_bytes() == b"decisions"
    assert Project.load(target).is_trained
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")
                and not p.name.endswith(".lock")]


def test_a_crash_before_the_old_project_moved_leaves_it_in_place(archive, tmp_path):
    from tagalign.shipping import swap

    url, _ = archive
    target, _ = download(url, tmp_path / "proj")
    (target / "feedback.sqlite").write_bytes(b"decisions")
    download(url, tmp_path / "other")
    (tmp_path / "other").rename(swap.incoming(target))  # verified, never swapped in
    with pytest.raises(TargetExistsError):
        download(url, target)
    assert (target / "feedback.sqlite").read_bytes() == b"decisions"
    assert not swap.incoming(target).exists()


# -- 2. --force only replaces a project ------------------------------------------------
def test_force_refuses_a_folder_that_is_not_a_project(archive, tmp_path):
    url, _ = archive
    folder = tmp_path / "store"
    (folder / "archives").mkdir(parents=True)
    (folder / "archives" / "a.tar.gz").write_bytes(b"kept")
    (folder / "server.log").write_text("kept", encoding="utf-8")
    with pytest.raises(TargetExistsError, match=r"not a tagalign project.*archives.*server.log"):
        download(url, folder, force=True)
    assert sorted(p.name for p in folder.rglob("*")) == ["a.tar.gz", "archives", "server.log"]
    runner = CliRunner()
    res = runner.invoke(app, ["download", url, "--into", str(folder), "--force"])
    assert res.exit_code == 1 and "not a tagalign project" in res.output
    assert (folder / "server.log").exists()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "proj-elsewhere", target_is_directory=True)
    download(url, tmp_path / "proj-elsewhere")
    with pytest.raises(TargetExistsError, match="symbolic link"):
        download(url, link, force=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert Project.load(download(url, empty, force=True)[0]).is_trained  # nothing to lose


# -- 3. the URL given to upload downloads ----------------------------------------------
def test_the_url_given_to_upload_downloads(trained, tmp_path):
    for url in (f"file://{tmp_path}/store/x", "memory://shipped/x/"):
        upload(trained, url)
        target, manifest = download(url, tmp_path / f"p{len(url)}")
        assert manifest["project"] == "tiny-hybrid" and Project.load(target).is_trained
    runner = CliRunner()
    up = runner.invoke(app, ["upload", str(trained), f"file://{tmp_path}/cli"])
    assert up.exit_code == 0, up.output
    down = runner.invoke(app, ["download", f"file://{tmp_path}/cli", "--into",
                               str(tmp_path / "c")])
    assert down.exit_code == 0, down.output
    (tmp_path / "cli" / "other.tar.gz").write_bytes(b"")
    with pytest.raises(ShippingError, match="several archives.*other.tar.gz"):
        download(f"file://{tmp_path}/cli", tmp_path / "d")  # which one is not guessed


# -- 4. archive checks -----------------------------------------------------------------
def _members(url: str) -> list[tuple[str, bytes]]:
    with fsspec.open(url, "rb") as fh, tarfile.open(fileobj=fh, mode="r:*") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]


def _listed(members, extra: dict[str, bytes]) -> list[tuple[str, bytes]]:
    manifest = json.loads(members[0][1])
    manifest["files"].update({rel: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
                              for rel, d in extra.items()})
    return [(MANIFEST, json.dumps(manifest).encode()), *members[1:],
            *((f"project/{rel}", d) for rel, d in extra.items())]


def _write_gz(path, members, sizes: dict[str, int] | None = None) -> str:
    """A .tar.gz; ``sizes`` gives members a header size other than their data's."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = (sizes or {}).get(name, len(data))
            tar.addfile(info, io.BytesIO(data.ljust(info.size, b"\0")))
    return str(path)


def test_a_member_larger_than_its_manifest_size_is_never_written(archive, tmp_path):
    url, _ = archive
    members = _members(url)
    i = next(i for i, (n, _) in enumerate(members) if n.endswith("recipe.json"))
    bomb = _write_gz(tmp_path / "bomb.tar.gz", members, {members[i][0]: 64 << 20})
    assert (tmp_path / "bomb.tar.gz").stat().st_size < 1 << 20  # 64 MB of zeros, packed
    with pytest.raises(ShippingError, match=r"recipe.json is 67108864 bytes.*manifest"):
        download(bomb, tmp_path / "p")
    assert not (tmp_path / "p").exists() and \
        not [q for q in tmp_path.glob(".p.*") if q.suffix != ".lock"]


def test_a_manifest_larger_than_the_free_disk_is_refused(archive, tmp_path):
    url, _ = archive
    members = _members(url)
    manifest = json.loads(members[0][1])
    first = next(iter(manifest["files"]))
    manifest["files"][first]["size"] = 1 << 60
    huge = _write_gz(tmp_path / "huge.tar.gz", [(MANIFEST, json.dumps(manifest).encode()),
                                                *members[1:]])
    with pytest.raises(ShippingError, match="free"):
        download(huge, tmp_path / "p")


@pytest.mark.parametrize("rel", ["feedback.sqlite", "feedback.sqlite-wal", "work/phase.json",
                                 "model/.hidden"])
def test_entries_upload_never_ships_are_refused(archive, tmp_path, rel):
    url, _ = archive
    bad = _write_gz(tmp_path / "bad.tar.gz", _listed(_members(url), {rel: b"{}"}))
    with pytest.raises(ShippingError, match=f"{rel}.*never shipped"):
        download(bad, tmp_path / "p")
    assert not (tmp_path / "p").exists()


def _safetensors(header_len: int) -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
    header = header.encode().ljust(header_len, b" ")  # the format pads with spaces
    return struct.pack("<Q", header_len) + header + b"\0" * 8


@pytest.mark.parametrize("header_len", [640, 896, 1152, 1408])
def test_a_safetensors_file_is_not_taken_for_a_pickle(trained, tmp_path, header_len):
    data = _safetensors(header_len)
    assert data[0] == 0x80 and 2 <= data[1] <= 5  # pickle protocol 2-5's first bytes
    copy = tmp_path / "tiny-hybrid"
    shutil.copytree(trained, copy)
    (copy / "model" / "head.safetensors").write_bytes(data)
    url, manifest = upload(copy, f"file://{tmp_path}/store/")
    assert "model/head.safetensors" in manifest["files"]
    target, _ = download(url, tmp_path / "p")
    assert (target / "model" / "head.safetensors").read_bytes() == data
    # the same first bytes without a JSON header are still a pickle
    (copy / "model" / "head.safetensors").write_bytes(data[:8] + b"not json" + data[16:])
    with pytest.raises(ShippingError, match="looks like a pickle"):
        upload(copy, f"file://{tmp_path}/store2/")


# -- 5. damaged archives ---------------------------------------------------------------
def test_truncated_and_non_gzip_archives_are_clear_errors(archive, tmp_path):
    url, _ = archive
    data = fsspec.open(url, "rb").open().read()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    text = tmp_path / "text.tar.gz"
    text.write_bytes(b"<html>502 Bad Gateway</html>\n" * 40)
    empty = tmp_path / "empty.tar.gz"
    empty.write_bytes(gzip.compress(b""))
    runner = CliRunner()
    for bad in (cut, text, empty):
        with pytest.raises(ShippingError, match=f"{bad.name}: .*(damaged|not a)"):
            download(str(bad), tmp_path / "p")
        res = runner.invoke(app, ["download", str(bad), "--into", str(tmp_path / "p")])
        assert res.exit_code == 1 and "error:" in res.output, res.output
        assert isinstance(res.exception, SystemExit)  # no traceback
        assert not (tmp_path / "p").exists()
