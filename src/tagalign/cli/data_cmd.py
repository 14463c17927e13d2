"""`tagalign data download`: the public LLMs4Subjects dataset, converted to our JSONL."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import TaskID

from tagalign.cli.app import console, data_app
from tagalign.cli.common import progress
from tagalign.records.convert import fetch_dataset

ARCHIVE = "https://github.com/jd-coderepos/llms4subjects/archive/refs/heads/main.zip"


@data_app.command("download")
def download(
    out: Path = typer.Option(Path("data/llms4subjects"), "--out", "-o", help="Target folder."),
    url: str = typer.Option(ARCHIVE, "--url", help="Archive of the dataset repository."),
) -> None:
    """Fetch the public LLMs4Subjects dataset and convert it to tagalign JSONL.

    Example: tagalign data download --out data/llms4subjects && TAGALIGN_DATA=data/llms4subjects make demo
    """
    with progress() as bar:
        tasks: dict[str, TaskID] = {}

        def on_progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total or None, rate="")
            bar.update(tasks[phase], completed=done)

        counts = fetch_dataset(url, out, on_progress)
    for name, n in counts.items():
        console.print(f"{out / (name + '.jsonl.gz')}: {n} records")
