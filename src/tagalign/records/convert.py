"""Convert any record source (e.g. the official JSON-LD tree) to our JSONL(.gz) format."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from tagalign.errors import InputError
from tagalign.io import InputReport, atomic_text
from tagalign.records.loaders import read_records
from tagalign.records.record import Record
from tagalign.runtime import ProgressCallback

log = logging.getLogger(__name__)


def write_jsonl(path: Path, records: Iterable[Record], split: str | None = None) -> int:
    """Write records atomically as JSONL (gzip when the name ends in ``.gz``)."""
    n = 0
    with atomic_text(Path(path)) as fh:
        for rec in records:
            obj = rec.to_json()
            if split:
                obj["split"] = split
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
    return n


def convert_tree(root: Path, out: Path) -> dict[str, int]:
    """Every ``{split}`` folder holding ``{Type}/{lang}/*.jsonld`` → ``out/{split}.jsonl.gz``."""
    counts: dict[str, int] = {}
    for split_dir in sorted({p.parents[2] for p in root.rglob("*.jsonld")}):
        name = split_dir.name
        report = InputReport()
        counts[name] = write_jsonl(out / f"{name}.jsonl.gz", read_records(split_dir,
                                                                          report=report), name)
        if (summary := report.end_summary()) is not None:
            log.warning(summary)
    return counts


def download(url: str, dest: Path, progress: ProgressCallback | None = None) -> None:
    """Fetch ``url`` into the file ``dest``; ``progress(phase, bytes, total or 0)``. A
    network or file error raises `InputError` (the message says what to check)."""
    import urllib.error
    import urllib.request

    phase = f"downloading {url.rsplit('/', 1)[-1]}"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(dest, "wb") as out:
            total, done = int(resp.headers.get("Content-Length") or 0), 0
            while chunk := resp.read(1 << 20):
                out.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(phase, done, total)
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"could not download {url}: {exc}. Check the network or pass "
                         "--url.") from exc


def fetch_dataset(url: str, out: Path, progress: ProgressCallback | None = None
                  ) -> dict[str, int]:
    """Download the LLMs4Subjects repository archive at ``url``, convert its JSON-LD
    records to ``out/<split>.jsonl.gz`` (`convert_tree`) and copy its GND subjects file
    beside them; records per split. An archive without records raises `InputError`."""
    import shutil
    import tempfile
    import zipfile

    with tempfile.TemporaryDirectory(prefix="tagalign-dl-") as tmp:
        archive = Path(tmp) / "dataset.zip"
        download(url, archive, progress)
        if progress is not None:
            progress("unpacking", 0, 0)
        try:
            zipfile.ZipFile(archive).extractall(tmp)
        except zipfile.BadZipFile as exc:
            raise InputError(f"{url} is not a zip archive: {exc}") from exc
        counts = convert_tree(Path(tmp), out)
        gnd = next(Path(tmp).rglob("GND-Subjects-all.json"), None)
        if gnd is not None:
            shutil.copy(gnd, out / gnd.name)
    if not counts:
        raise InputError("no JSON-LD records found in the archive")
    return counts
