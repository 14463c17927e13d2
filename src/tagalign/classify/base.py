"""Classifier recipes: small registered classes with one save format.

A recipe stores its parameters in the constructor and learns in `fit` (state ends with
``_``). `Classifier.fit` learns the label set from train, calls the recipe's `_fit`, then
tunes the decision thresholds on dev (global and per class, for micro-F1). `save` writes a
folder atomically: the manifest ``config.json`` (every model family's,
`tagalign.model_files.ModelFamily`: format, recipe, parameters, versions; then the label
set, thresholds, history) plus the recipe's own pickle-free files; `Classifier.load` refuses
a folder whose label set is not the expected one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import numpy as np

from tagalign.classify.data import Example, LabelSet
from tagalign.classify.thresholds import decide, tune
from tagalign.errors import (
    ConflictError,
    InputError,
    MissingFileError,
    ModelFormatError,
    file_error,
    trained,
)
from tagalign.io import atomic_dir, json_object, read_json, register_kind
from tagalign.model_files import ModelFamily
from tagalign.registry import Registry
from tagalign.runtime import ProgressCallback, Runtime

CLASSIFIERS: Registry[type[Classifier]] = Registry("classify recipe")


class LabelSetMismatch(ConflictError, ValueError):
    """A saved classifier was asked to work with a different label set."""


register_classifier = CLASSIFIERS.register


def get_classifier(name: str, runtime: Runtime | None = None, **params: Any) -> Classifier:
    """The recipe ``name`` with ``params``, run with ``runtime`` (default: its defaults)."""
    clf = CLASSIFIERS.lookup(name)(**params)
    if runtime is not None:
        clf.runtime = runtime
    return clf


#: Share of train held out to tune the thresholds when no dev is given (at least 1 record).
HOLDOUT_FRACTION = 0.1


def limit_examples(train: Sequence[Example], y: np.ndarray, limit: int | None, seed: int
                   ) -> tuple[list[Example], np.ndarray]:
    """A seeded sample of ``limit`` training examples (their label rows with them), in file
    order; all of them when ``limit`` is None or 0."""
    if not limit:
        return list(train), y
    keep = np.sort(np.random.default_rng(seed).permutation(len(train))[:limit])
    return [train[i] for i in keep], y[keep]


def holdout(train: list[Example], seed: int) -> tuple[list[Example], list[Example]]:
    """``(rest, held_out)``: a seeded `HOLDOUT_FRACTION` of ``train``, in input order."""
    n_out = max(1, round(len(train) * HOLDOUT_FRACTION))
    if len(train) < 2:
        raise InputError("without --dev the thresholds need held-out training records; "
                         "give at least 2 labelled records or a dev file")
    out = set(np.random.default_rng(seed).permutation(len(train))[:n_out].tolist())
    return ([ex for i, ex in enumerate(train) if i not in out],
            [ex for i, ex in enumerate(train) if i in out])


T = TypeVar("T")


class Classifier(ModelFamily, ABC):
    """A classify recipe: its ``defaults``, their ``ranges``, `check_params` and its
    manifest as every model family's (`ModelFamily`); ``retired`` (``threads``: the
    runtime's, `Classifier.runtime`) are dropped."""

    kind = "classifier"
    retrain = "the classifier (tagalign classify train)"
    model_format, read_formats = 1, (1,)

    @classmethod
    def unknown_params_message(cls, unknown: list[str]) -> str:
        return (f"recipe {cls.name!r}: unknown parameter(s) {unknown}; "
                f"known: {sorted(cls.defaults)}")

    def __init__(self, **params: Any):
        self.check_params(params)
        self.params = self.with_defaults(params)
        self._params_set()
        #: threads (`Runtime.threads_or`); `get_classifier`/`load_classifier` pass the
        #: caller's, else the defaults
        self.runtime = Runtime()
        self.progress: ProgressCallback | None = None
        self.labels_: LabelSet | None = None
        self.thresholds_: dict[str, Any] = {}
        self.history_: dict[str, list[float]] = {}

    @property
    def label_set(self) -> LabelSet:
        """The labels it learned (`NotTrainedError` before `fit` or `load`)."""
        return self._trained(self.labels_)

    def _trained(self, part: T | None) -> T:
        """``part``, learned by `fit` or `load` (`NotTrainedError` before them)."""
        return trained(part, f"classifier {self.name!r}")

    def _tick(self, what: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(what, done, total)

    # -- learning -------------------------------------------------------------------
    def fit(self, train: Sequence[Example], dev: Sequence[Example] | None = None,
            labels: Sequence[str] | None = None, *,
            progress: ProgressCallback | None = None) -> Classifier:
        """Learn from labelled ``train``; tune thresholds on ``dev``, or without dev on a
        seeded held-out slice of train (`HOLDOUT_FRACTION`, not trained on), so no
        figure measured on training records reads as a dev figure.

        ``labels``: the label set, kept whole even for labels without training examples
        (default: the labels seen in train). ``progress``: told ``(phase, done, total)``
        while this model learns and, later, scores (kept as `progress`)."""
        if progress is not None:
            self.progress = progress
        train = [ex for ex in train if ex.labels]
        if not train:
            raise InputError("no training example has labels")
        self.labels_ = LabelSet(labels) if labels is not None else LabelSet.from_examples(train)
        outside = sorted({lab for ex in train for lab in ex.labels} - set(self.labels_.labels))
        if outside:
            raise InputError(f"{len(outside)} training labels are not in the label set: "
                             f"{outside[:10]}")
        train, tune_on, where = self._tuning_records(train, dev)
        self._fit(train, self.labels_.matrix(train))
        found = tune(self._tuning_scores(tune_on), self.labels_.matrix(tune_on))
        self.thresholds_ = {k.replace("dev_", f"{where}_"): v for k, v in found.items()}
        self.thresholds_["tuned_on"] = where
        self.thresholds_["tuned_on_records"] = len(tune_on)
        return self

    def _tuning_records(self, train: list[Example], dev: Sequence[Example] | None
                        ) -> tuple[list[Example], list[Example], str]:
        """``(records to learn from, records to tune thresholds on, where those come
        from)``: the labelled dev records, or without them a seeded holdout of train."""
        tune_on = [ex for ex in dev or () if ex.labels]
        if tune_on:
            return train, tune_on, "dev"
        # every recipe's config (`tagalign.classify.config`) has a seed; one without: 0
        rest, out = holdout(train, int(getattr(self.config, "seed", 0)))
        return rest, out, "holdout"

    @abstractmethod
    def _fit(self, train: Sequence[Example], y: np.ndarray) -> None:
        ...

    def _tuning_scores(self, tune_on: Sequence[Example]) -> np.ndarray:
        """The scores the thresholds are tuned on: the trained model's on records it never
        saw (a stacker learned on ``tune_on`` itself overrides this: out-of-fold scores)."""
        return self.predict_proba(tune_on)

    @abstractmethod
    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        """(n, |labels|) scores in [0, 1]."""

    # -- deciding -------------------------------------------------------------------
    @property
    def default_decision(self) -> str:
        """The thresholds `decide` uses unless told: ``per_class``, or what the recipe
        chose when it tuned them (``thresholds_["default"]``, e.g. `subjects-stack`)."""
        return self.thresholds_.get("default", "per_class")

    def decide(self, probs: np.ndarray, decision: str | None = None) -> np.ndarray:
        """0/1 matrix from scores with the tuned ``per_class`` or ``global`` thresholds
        (None: `default_decision`)."""
        decision = decision or self.default_decision
        if decision not in ("per_class", "global"):
            raise InputError("decision must be 'per_class' or 'global'")
        return decide(probs, np.asarray(self.thresholds_[decision], np.float32))

    def predict(self, examples: Sequence[Example], decision: str | None = None
                ) -> list[list[tuple[str, float]]]:
        """Per example, its chosen labels with scores, best first."""
        probs = self.predict_proba(examples)
        chosen = self.decide(probs, decision)
        labels = self.label_set.labels
        out = []
        for row, keep in zip(probs, chosen, strict=True):
            cols = np.flatnonzero(keep)
            cols = cols[np.argsort(-row[cols], kind="stable")]
            out.append([(labels[j], float(row[j])) for j in cols])
        return out

    # -- persistence ----------------------------------------------------------------
    def _twin(self, params: dict[str, Any]) -> Self:
        return type(self)(**params)

    def save(self, folder: Path | str, extra: dict[str, Any] | None = None) -> None:
        folder = Path(folder)
        with atomic_dir(folder) as tmp:
            self._save_state(tmp)
            self.write_manifest(tmp, self.params, labels=self.label_set.labels,
                                thresholds=self.thresholds_, history=self.history_,
                                **(extra or {}))

    @classmethod
    def load(cls, folder: Path | str, labels: Sequence[str] | None = None,
             runtime: Runtime | None = None) -> Classifier:
        """A saved classifier (of the recipe its manifest names; called on a recipe's class,
        of that recipe) run with ``runtime`` (default: its defaults); with ``labels``,
        refuse one trained on another label set. A ``threads`` saved by an older tagalign is
        dropped (`Classifier.retired`)."""
        folder = Path(folder)
        cls.check_folder(folder, "classifier",
                         f"{folder}: not a saved classifier (no config.json)")
        try:
            config = read_json(folder / "config.json")
        except OSError as exc:
            raise file_error(folder / "config.json", exc) from exc
        cls.check_format(config, folder)
        lacking = [key for key in ("recipe", "params", "labels", "thresholds") if key not in config]
        if lacking:
            raise ModelFormatError(f"{folder}: config.json lacks {', '.join(lacking)}; retrain "
                                   "the classifier")
        saved = list(config["labels"])
        if labels is not None and list(labels) != saved:
            missing, extra = sorted(set(labels) - set(saved)), sorted(set(saved) - set(labels))
            why = (f"{len(missing)} of the {len(set(labels))} expected labels missing "
                   f"{_some(missing)}, {len(extra)} unexpected {_some(extra)}" if missing or extra
                   else "same labels in another order")
            raise LabelSetMismatch(f"{folder}: trained on another label set "
                                   f"({len(saved)} labels; {why}); train with --label-set to "
                                   "keep every label")
        clf = get_classifier(config["recipe"], runtime, **config["params"])
        if not isinstance(clf, cls):
            raise InputError(f"{folder}: a {config['recipe']!r} classifier, not {cls.name!r}")
        clf.labels_ = LabelSet(saved)
        clf.thresholds_ = config["thresholds"]
        clf.history_ = config.get("history", {})
        try:
            clf._load_state(folder)
        except FileNotFoundError as exc:  # a part of the folder is gone
            raise MissingFileError(str(exc), exc.filename) from exc
        return clf

    @abstractmethod
    def _save_state(self, folder: Path) -> None:
        ...

    @abstractmethod
    def _load_state(self, folder: Path) -> None:
        ...


def _is_classifier(folder: Path) -> bool:
    config = json_object(folder / "config.json")
    return config is not None and "labels" in config and "thresholds" in config


register_kind("classifier", "a classifier, read by `tagalign classify predict`", _is_classifier)

#: `Classifier.load` (the name callers used before the families shared one convention)
load_classifier = Classifier.load


def _some(labels: list[str], shown: int = 5) -> str:
    more = f" and {len(labels) - shown} more" if len(labels) > shown else ""
    return f"{labels[:shown]}{more}"


def read_label_set(path: Path | str) -> list[str]:
    """Labels from a text file (one per line) or a CSV whose first column holds them
    (a header row is skipped when its first cell reads like one, e.g. ``domains.csv``).
    A missing or unreadable file, or one without labels, raises the package's error."""
    import csv

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"label set not found: {path} (one label per line, or a CSV "
                               "such as domains.csv)", path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = [r for r in csv.reader(fh) if r and r[0].strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error(path, exc, "label set") from exc
    labels = [r[0].strip() for r in rows]
    if path.suffix == ".csv" and labels and len(rows[0]) > 1 and \
            rows[0][0].strip().lower() in ("abbreviation", "code", "label", "id"):
        labels = labels[1:]
    if not labels:
        raise InputError(f"label set {path} holds no labels")
    return labels
