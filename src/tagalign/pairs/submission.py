"""The CoMeDi submission layout: one ``<language>.tsv`` per language with
``identifier1, identifier2, prediction`` (1..4), plus our ``cosine`` column (the raw score;
a scorer reading columns by name ignores it). Scoring a folder against gold labels."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tagalign.errors import InputError
from tagalign.io import atomic_text
from tagalign.pairs.data import Pair, language_dirs, read_labels, read_tsv
from tagalign.pairs.metrics import Floats, evaluate
from tagalign.records import InputReport

COLUMNS = ("identifier1", "identifier2", "prediction", "cosine")


def write_language(out_dir: Path, language: str, pairs: Sequence[Pair],
                   labels: Sequence[int] | np.ndarray, scores: Floats) -> Path:
    """Write (atomically) one language's predictions."""
    path = Path(out_dir) / f"{language}.tsv"
    with atomic_text(path) as fh:
        fh.write("\t".join(COLUMNS) + "\n")
        for p, label, score in zip(pairs, labels, scores, strict=True):
            fh.write(f"{p.use1.identifier}\t{p.use2.identifier}\t{int(label)}\t{score:.6f}\n")
    return path


def read_language(path: Path, report: InputReport
                  ) -> dict[tuple[str, str], tuple[int, float | None]]:
    """{(identifier1, identifier2): (prediction, cosine or None)} of one prediction file."""
    out: dict[tuple[str, str], tuple[int, float | None]] = {}
    for number, row in read_tsv(path, ("identifier1", "identifier2", "prediction"), report):
        try:
            label = int(float(row["prediction"]))
            cosine = float(row["cosine"]) if row.get("cosine") not in (None, "") else None
        except ValueError:
            label = 0
        if label not in (1, 2, 3, 4):
            report.bad(f"{path}:{number}", f"prediction {row['prediction']!r} is not 1..4")
            continue
        out[(row["identifier1"], row["identifier2"])] = (label, cosine)
    return out


def score_folders(gold_dir: Path, pred_dir: Path, report: InputReport) -> dict:
    """Alpha/Spearman/confusion per language of ``pred_dir`` against ``gold_dir``'s labels.
    Gold pairs without a prediction are reported and left out (``missing`` counts them);
    Spearman is of the cosine when every scored pair has one, else of the labels."""
    gold, pred, cos, langs = [], [], [], []
    missing: dict[str, int] = {}
    for folder in language_dirs(gold_dir):
        labels = read_labels(folder, report)
        if not labels:
            report.bad(str(folder), "no labels.tsv: nothing to score against")
            continue
        path = Path(pred_dir) / f"{folder.name}.tsv"
        if not path.exists():
            report.bad(str(path), f"no predictions for {folder.name}")
            missing[folder.name] = len(labels)
            continue
        predicted = read_language(path, report)
        for key, label in labels.items():
            if key not in predicted:
                missing[folder.name] = missing.get(folder.name, 0) + 1
                continue
            gold.append(label)
            pred.append(predicted[key][0])
            cos.append(predicted[key][1])
            langs.append(folder.name)
        report.records_read += len(predicted)
    if not gold:
        raise InputError(f"no gold pair of {gold_dir} has a prediction in {pred_dir}")
    use_cos = all(c is not None for c in cos)
    result = evaluate(gold, pred, langs, np.asarray(cos, float) if use_cos else None)
    result["spearman_of"] = "cosine" if use_cos else "prediction"
    result["missing"] = missing
    return result
