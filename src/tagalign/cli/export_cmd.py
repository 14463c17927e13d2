"""`tagalign export vectors|pairs`: the R3 preparation scripts' CSV/JSONL exports."""

from __future__ import annotations

from pathlib import Path

import typer

from tagalign.cli.app import app, console
from tagalign.cli.common import load_records
from tagalign.project import Project
from tagalign.recipes.export import export_pairs, export_subject_vectors, subject_index_of
from tagalign.vocab import load_vocabulary

export_app = typer.Typer(help="Export subject vectors or training pairs (CSV/JSONL).",
                         no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("vectors")
def vectors(
    project_dir: Path = typer.Argument(..., help="A trained embedding-recipe project."),
    out: Path = typer.Option(..., "--out", "-o", help="File .csv or .jsonl (.gz ok)."),
    model: str = typer.Option(None, "--model", help="focused-transform per-language: de or en."),
) -> None:
    """Write the subject "vector database" (id, label, vector) of a dense recipe.

    Example: tagalign export vectors r3-project --out subjects.jsonl --model de
    """

    project = Project.load(project_dir)
    positions, index, lang = subject_index_of(project.trained_recipe(), model)
    n = export_subject_vectors(out, project.vocab, positions, index.vectors(), lang)
    console.print(f"{n} subject vectors written to {out}")


@export_app.command("pairs")
def pairs(
    records: Path = typer.Argument(..., help="Records (train or dev)."),
    vocab: Path = typer.Option(..., "--vocab", "-v", help="Vocabulary for the labels."),
    out: Path = typer.Option(..., "--out", "-o", help="File .csv or .jsonl (.gz ok)."),
) -> None:
    """Write record ↔ gold-subject pairs (id, language, text, subject ids and labels).

    Example: tagalign export pairs train.jsonl.gz --vocab gnd/ --out train-pairs.csv
    """

    voc = load_vocabulary(vocab)
    n = export_pairs(out, load_records(records, vocab=voc), voc)
    console.print(f"{n} pairs written to {out}")
