"""`tagalign data download`: the public LLMs4Subjects dataset, converted to our JSONL."""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import typer

from tagalign.cli.app import console, data_app, fail
from tagalign.cli.common import progress
from tagalign.records.convert import convert_tree

ARCHIVE = "https://github.com/jd-coderepos/llms4subjects/archive/refs/heads/main.zip"


def _download(url: str, dest: Path) -> None:
    with progress() as bar, urllib.request.urlopen(url, timeout=60) as resp, \
            open(dest, "wb") as out:
        total = int(resp.headers.get("Content-Length") or 0) or None
        task = bar.add_task(f"downloading {url.rsplit('/', 1)[-1]}", total=total, rate="")
        while chunk := resp.read(1 << 20):
            out.write(chunk)
            bar.advance(task, len(chunk))


@data_app.command("download")
def download(
    out: Path = typer.Option(Path("data/llms4subjects"), "--out", "-o", help="Target folder."),
    url: str = typer.Option(ARCHIVE, "--url", help="Archive of the dataset repository."),
) -> None:
    """Fetch the public LLMs4Subjects dataset and convert it to tagalign JSONL.

    Example: tagalign data download --out data/llms4subjects && TAGALIGN_DATA=data/llms4subjects make demo
    """
    with tempfile.TemporaryDirectory(prefix="tagalign-dl-") as tmp:
        archive = Path(tmp) / "dataset.zip"
        try:
            _download(url, archive)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            fail(f"could not download {url}: {exc}. Check the network or pass --url.")
        with console.status("unpacking …"):
            try:
                zipfile.ZipFile(archive).extractall(tmp)
            except zipfile.BadZipFile as exc:
                fail(f"{url} is not a zip archive: {exc}")
        counts = convert_tree(Path(tmp), out)
        gnd = next(Path(tmp).rglob("GND-Subjects-all.json"), None)
        if gnd is not None:
            shutil.copy(gnd, out / gnd.name)
    for name, n in counts.items():
        console.print(f"{out / (name + '.jsonl.gz')}: {n} records")
    if not counts:
        fail("no JSON-LD records found in the archive")
