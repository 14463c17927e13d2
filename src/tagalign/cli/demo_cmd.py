"""`tagalign demo` (what `make demo` runs)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from tagalign.cli.app import app, console
from tagalign.cli.suggest_cmd import print_suggestions
from tagalign.demo import EXAMPLES, data_dir, load_demo_vocabulary, sample_records
from tagalign.project import DEFAULT_RECIPE, Project, Tagger
from tagalign.suggest import SuggestRequest


@app.command()
def demo(
    project_dir: Path = typer.Option(Path("demo-project"), "--project-dir",
                                     help="Where the demo project is written."),
    n_records: int = typer.Option(5000, "--records", help="Training records to sample."),
    recipe: str = typer.Option(DEFAULT_RECIPE, "--recipe", help="Recipe to train."),
) -> None:
    """Train the default tagger on a 5,000-record sample and tag two examples.

    Records come from $TAGALIGN_DATA (default ../shared/data/llms4subjects/train.jsonl.gz);
    without them the demo shows zero-shot label matches from the vocabulary alone.

    Example: TAGALIGN_DATA=data/llms4subjects tagalign demo
    """
    t0 = time.perf_counter()
    vocab = load_demo_vocabulary()
    train_file = data_dir() / "train.jsonl.gz"
    if train_file.exists():
        records = sample_records(train_file, vocab, n_records)
        console.log(f"{len(records)} training records sampled from {train_file}")
        project = Project.create(project_dir, vocab, recipe, overwrite=True)
        project.train(records, resume=False)
    else:
        console.print(f"[yellow]No training records at {train_file} (set TAGALIGN_DATA, or run "
                      "`tagalign data download`): showing zero-shot suggestions from the "
                      "vocabulary alone (label matching).[/]")
        project = Project.create(project_dir, vocab, "lexical", overwrite=True)
        project.train([], resume=False)
    answers = Tagger(project).tag(EXAMPLES, SuggestRequest(limit=10, quality=False))
    for rec, tagged in zip(EXAMPLES, answers, strict=True):
        console.rule(f"[bold]{rec.title}[/] ({rec.language})")
        print_suggestions(tagged.suggestions)
    console.log(f"demo finished in {time.perf_counter() - t0:.0f} s; project in {project_dir}")
    # learning is off by default (as in Annif); the demo's server shows the feedback loop
    console.print(f"Try the web page with accept/reject: [bold]tagalign serve {project_dir} "
                  "--allow-learn[/] (then http://127.0.0.1:8000/)")
