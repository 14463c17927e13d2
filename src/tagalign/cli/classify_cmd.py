"""`tagalign classify train|predict|eval`: multi-label classification (record domains)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.table import Table

from tagalign.cli.app import app, console, must_exist, out, refuse
from tagalign.cli.common import PhaseBars, make_runtime, parse_params, progress
from tagalign.cli.report import print_summary
from tagalign.predictions import (
    PredictionStream,
    labels_line,
    read_label_predictions,
)
from tagalign.records import InputReport, read_records

classify_app = typer.Typer(
    help="Multi-label classification of records (LinSearch domains or any label set).",
    no_args_is_help=True)
app.add_typer(classify_app, name="classify")

RECIPES = ("linear-ngrams (TF-IDF word uni+bigrams and character n-grams + logistic "
           "regression), linear (TF-IDF words + logistic regression), label-contrastive "
           "(mCPT) or subjects-stack (text + a subject project's suggestions, the default "
           "with --subjects-project)")
STACK = "subjects-stack"
SUBJECTS_HELP = ("A trained subject project whose suggestions the subjects-stack recipe "
                 "reads beside the text (default with predict: the one the model was "
                 "trained with).")


def _subject_project(path: Path, runtime=None):
    from tagalign.project import Project

    project = Project.load(path, runtime=runtime)
    project.trained_recipe()  # NotTrainedError before any record is read
    return project


def _records_by_id(path: Path) -> dict | None:
    """The records of a record source by id (their titles count apart from the abstract
    for the subject project); None for plain text JSONL."""
    from tagalign.classify.data import is_text_jsonl

    if is_text_jsonl(path):
        return None
    return {r.id: r for r in read_records(path, report=InputReport())}


def _examples(path: Path, label_field: str, *, strict: bool, require_labels: bool,
              what: str):
    from tagalign.classify import read_examples

    report = InputReport(strict=strict)
    out = read_examples(path, label_field=label_field, report=report,
                        require_labels=require_labels)
    print_summary(report)
    console.log(f"{what}: {len(out)} records from {path}")
    return out


def _label_set(path: Path | None) -> list[str] | None:
    from tagalign.classify import read_label_set

    return None if path is None else read_label_set(path)


def _load(model_dir: Path, label_set: Path | None):
    import tagalign.cli.kinds  # noqa: F401 - the project's kinds: a project folder is named
    from tagalign.classify import Classifier

    return Classifier.load(model_dir, labels=_label_set(label_set))


@classify_app.command("train")
def train(
    model_dir: Path = typer.Argument(..., help="Folder to write the trained classifier to."),
    train_src: Path = typer.Option(..., "--train", "-t", help="Training records: any record source tagalign reads, or JSONL with 'text' and 'labels'."),
    dev: Path = typer.Option(None, "--dev", "-d", help="Dev records: thresholds are tuned on them (micro-F1), then scored."),
    recipe: str = typer.Option(None, "--recipe", "-r", help=f"One of: {RECIPES}. Default: the better one on our dev data."),
    labels: str = typer.Option("domains", "--labels", help="Record field holding the labels (domains or subjects)."),
    label_set: Path = typer.Option(None, "--label-set", help="The label set (one per line, or a CSV such as domains.csv): every label kept, even without training examples (default: the labels seen in train)."),
    param: list[str] = typer.Option(None, "--param", "-p", help="Recipe parameter key=value (JSON values), e.g. epochs_contrastive=5."),
    config: Path = typer.Option(None, "--config", help="JSON file of recipe parameters."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed record."),
    threads: int = typer.Option(0, "--threads", help="CPU threads for torch (0 = all)."),
    subjects_project: Path = typer.Option(None, "--subjects-project", help="A trained subject project (recipe subjects-stack, the default then): its suggestions for the --dev records are read beside the text, and those it kept for the training records it held out (the hybrid's split B); it must not have trained on the dev records."),
) -> None:
    """Train a multi-label classifier and save it (model, thresholds, label set, config).

    Example: tagalign classify train domains-model --train train.jsonl.gz --dev dev.jsonl.gz --recipe linear

    Text and subjects: tagalign classify train domains-stack --train train.jsonl.gz --dev dev.jsonl.gz --subjects-project gnd-hybrid
    """
    from tagalign.classify import CLASSIFIERS, DEFAULT_RECIPE
    from tagalign.workflows import train_classifier

    runtime = make_runtime(threads)  # the classifier's and the subject project's threads
    for what, path in (("training records", train_src), ("dev records", dev),
                       ("subject project", subjects_project)):
        if path is not None:
            must_exist(path, f"{what} not found: {path}")
    recipe = recipe or (STACK if subjects_project is not None else DEFAULT_RECIPE)
    if (recipe == STACK) != (subjects_project is not None):
        refuse(f"--subjects-project goes with --recipe {STACK} (and {STACK} needs it)")
    label_list = _label_set(label_set)
    params = parse_params(param, config)
    CLASSIFIERS.lookup(recipe).check_params(params)  # before any record is read
    train_ex = _examples(train_src, labels, strict=strict, require_labels=True,
                         what="training records")
    dev_ex = _examples(dev, labels, strict=strict, require_labels=True,
                       what="dev records") if dev else None
    project = records = None
    if recipe == STACK:
        project = _subject_project(subjects_project, runtime)
        records = _records_by_id(dev) if dev_ex else None
    with progress() as bar:
        done = train_classifier(model_dir, train_ex, dev_ex, recipe=recipe, params=params,
                                labels=label_list, label_field=labels,
                                subjects_project=project, dev_records=records,
                                progress=PhaseBars(bar), runtime=runtime)
    clf = done.classifier
    if clf.thresholds_["tuned_on"] == "holdout":
        console.print(f"no --dev: thresholds tuned on {clf.thresholds_['tuned_on_records']} "
                      "held-out training records (a seeded 10%, not trained on); no dev "
                      "scores reported", soft_wrap=True)
    elif clf.thresholds_["tuned_on"] == "held_out":
        console.print(f"no --dev: the stacker learned from and tuned its thresholds on "
                      f"{clf.thresholds_['tuned_on_records']} training records the subject "
                      "project held out (out-of-fold micro-F1 "
                      f"{clf.thresholds_['held_out_micro_f1_' + clf.default_decision]:.4f}); no dev "
                      "scores reported", soft_wrap=True)
    if done.dev_scores is not None:
        _print_summary(done.dev_scores)
    console.log(f"[bold green]trained[/] {clf.name} ({len(clf.labels_)} labels) in "
                f"{done.seconds:.0f} s → {model_dir}")


@classify_app.command("predict")
def predict(
    model_dir: Path = typer.Argument(..., help="A trained classifier folder."),
    input: Path = typer.Option(..., "--input", "-i", help="Records to classify (any record source, or JSONL with 'text')."),
    output: Path = typer.Option(..., "--output", "-o", help="Predictions JSONL (.gz ok): {\"id\", \"labels\": [{\"label\", \"score\"}]} per line."),
    decision: str = typer.Option(None, "--decision", help="Thresholds: per_class or global (both tuned on dev). Default: per_class, or the one the model chose (subjects-stack chooses by cross-validation on dev)."),
    label_set: Path = typer.Option(None, "--label-set", help="Refuse a model not trained on exactly these labels (one per line, or a CSV such as domains.csv)."),
    batch_size: int = typer.Option(1024, "--batch-size", min=1, help="Records per batch."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed record."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run: keep what OUT.partial holds, classify the rest."),
    subjects_project: Path = typer.Option(None, "--subjects-project", help=SUBJECTS_HELP),
) -> None:
    """Label records with a trained classifier (at least one label per record).

    Example: tagalign classify predict domains-model --input dev.jsonl.gz --output domains.jsonl
    """
    if decision not in (None, "per_class", "global"):
        refuse("--decision must be per_class or global")
    must_exist(input, f"input records not found: {input}")
    clf = _load(model_dir, label_set)
    project = None
    if clf.name == STACK:
        where = subjects_project or (Path(clf.subjects_project_)
                                     if clf.subjects_project_ else None)
        if where is None or not where.exists():
            refuse(f"{model_dir} reads a subject project's suggestions; the one it was "
                   f"trained with ({where}) is not there: give --subjects-project")
        project = _subject_project(where)
        clf.bind(project.vocab, f"domain model {model_dir}")
    elif subjects_project is not None:
        refuse(f"{model_dir} is a {clf.name!r} classifier: it reads text alone "
               "(--subjects-project goes with subjects-stack models)")
    examples = _examples(input, "domains", strict=strict, require_labels=False,
                         what="input records")
    records = _records_by_id(input) if project is not None else None
    stream = PredictionStream(output, resume=resume).open()
    todo = [ex for ex in examples if ex.id not in stream.done]
    if len(todo) < len(examples):
        console.log(f"resuming: {len(examples) - len(todo)} records already in {stream.partial}")
    t0 = time.perf_counter()
    try:
        with progress() as bar:
            task = bar.add_task("classifying", total=len(todo), rate="")
            for i in range(0, len(todo), batch_size):
                chunk = todo[i:i + batch_size]
                if project is not None:
                    from tagalign.project.domains import suggest_into

                    suggest_into(project, chunk, clf.config.top_k, records, batch_size)
                for ex, row in zip(chunk, clf.predict(chunk, decision), strict=True):
                    stream.write_line(ex.id, labels_line(ex.id, row))
                stream.flush()
                done = i + len(chunk)
                bar.update(task, completed=done,
                           rate=f"{done / (time.perf_counter() - t0):.0f} rec/s")
    except BaseException:
        stream.close()
        raise
    stream.commit()
    console.log(f"{len(examples)} records classified → {output}")


@classify_app.command("eval")
def eval_(
    gold: Path = typer.Argument(..., help="Records with gold labels (any record source, or JSONL with 'labels')."),
    pred: Path = typer.Argument(..., help="Predictions JSONL from `tagalign classify predict`."),
    labels: str = typer.Option("domains", "--labels", help="Record field holding the gold labels."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (micro/macro-F1, per_class, by_language)."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line."),
) -> None:
    """Score label predictions: micro-F1 (headline), macro-F1, per-class P/R/F1, per language.

    Records without gold labels are left out; a record without a prediction counts as
    predicting nothing.

    Example: tagalign classify eval dev.jsonl.gz domains.jsonl --json
    """
    from tagalign.classify import LabelSet
    from tagalign.classify.data import Example
    from tagalign.classify.metrics import report

    gold_ex = _examples(gold, labels, strict=strict, require_labels=True, what="gold records")
    must_exist(pred, f"predictions not found: {pred}")
    rep = InputReport(strict=strict)
    predicted = read_label_predictions(pred, rep)
    print_summary(rep)
    missing = sum(ex.id not in predicted for ex in gold_ex)
    pred_ex = [Example(ex.id, "", predicted.get(ex.id, [])) for ex in gold_ex]
    label_set = LabelSet(sorted({lab for ex in gold_ex + pred_ex for lab in ex.labels}))
    scores = report(label_set.matrix(gold_ex), label_set.matrix(pred_ex), label_set.labels,
                    [ex.language for ex in gold_ex])
    scores["missing_predictions"] = int(missing)
    if as_json:
        print(json.dumps(scores, indent=2, ensure_ascii=False))
        return
    _print_summary(scores)
    table = Table("label", "P", "R", "F1", "support")
    for lab, s in sorted(scores["per_class"].items(), key=lambda kv: -kv[1]["support"]):
        table.add_row(lab, f"{s['precision']:.3f}", f"{s['recall']:.3f}", f"{s['f1']:.3f}",
                      str(s["support"]))
    out.print(table)
    if missing:
        console.print(f"{missing} gold records have no prediction (counted as empty)")


def _print_summary(scores: dict) -> None:
    table = Table("", "n", "micro-F1", "macro-F1")
    table.add_row("all", str(scores["n"]), f"{scores['micro_f1']:.4f}",
                  f"{scores['macro_f1']:.4f}")
    for lang, s in scores.get("by_language", {}).items():
        table.add_row(lang, str(s["n"]), f"{s['micro_f1']:.4f}", f"{s['macro_f1']:.4f}")
    out.print(table)
