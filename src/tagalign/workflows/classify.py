"""Train a classifier (`tagalign classify train`): a text classifier, or the domain model
beside a subject project (recipe ``subjects-stack``), saved into a folder with its dev
scores.

For the stack the subject project suggests for the dev records (never for the training
records: the profiles count their gold subjects), a dev record it learned from is refused
(`tagalign.project.domains.check_held_out`), and the training records it held out join the
stacker's records with the suggestions it kept for them
(`tagalign.project.domains.held_out_examples`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagalign.classify import DEFAULT_RECIPE, Classifier, Example, get_classifier
from tagalign.classify.metrics import report
from tagalign.classify.stack import SubjectStackClassifier
from tagalign.errors import UsageError, trained
from tagalign.project import Project
from tagalign.project.domains import check_held_out, held_out_examples, suggest_into
from tagalign.records import Record
from tagalign.runtime import ProgressCallback, Runtime

logger = logging.getLogger(__name__)

STACK = SubjectStackClassifier.name


@dataclass(frozen=True)
class ClassifierTraining:
    """What `train_classifier` did."""

    #: the trained classifier (saved in the folder given)
    classifier: Classifier
    #: seconds the classifier took to learn (the subject project's suggestions apart)
    seconds: float
    #: `tagalign.classify.metrics.report` of the dev records at the tuned thresholds (a
    #: stack's out of fold: each record scored by the stacker of the other folds); None
    #: without dev records
    dev_scores: dict[str, Any] | None
    #: training records the subject project held out that the stacker learned from
    held_out: int = 0


def train_classifier(folder: Path | str, train: Sequence[Example],
                     dev: Sequence[Example] | None = None, *, recipe: str | None = None,
                     params: Mapping[str, Any] | None = None,
                     labels: Sequence[str] | None = None, label_field: str = "domains",
                     subjects_project: Project | None = None,
                     dev_records: Mapping[str, Record] | None = None,
                     progress: ProgressCallback | None = None,
                     runtime: Runtime | None = None) -> ClassifierTraining:
    """Train ``recipe`` (default: ``subjects-stack`` beside a ``subjects_project``, else
    `tagalign.classify.DEFAULT_RECIPE`) with ``params`` on labelled ``train``, tune its
    thresholds on ``dev`` (without dev: on held-out records, see the recipe), score it on
    ``dev`` and save it into ``folder`` with the seconds, ``label_field`` and dev scores.

    ``labels``: the label set, every label kept (default: those seen in train).
    ``subjects_project``: a trained subject project whose suggestions the stack reads;
    ``dev_records``: the dev records by id, so the project reads their titles apart from
    their abstracts (default: an example's text as the title). ``progress``: told
    ``(phase, done, total)``. ``runtime``: the classifier's threads (default: the process's)."""
    recipe = recipe or (STACK if subjects_project is not None else DEFAULT_RECIPE)
    if (recipe == STACK) != (subjects_project is not None):
        raise UsageError(f"recipe {STACK} reads a subject project's suggestions: it needs "
                         "one, and no other recipe reads one")
    clf = get_classifier(recipe, runtime, **dict(params or {}))
    stack_args: dict[str, Any] = {}
    if isinstance(clf, SubjectStackClassifier) and subjects_project is not None:
        stack_args = _feed_stack(clf, subjects_project, train, dev, dev_records, progress)
    t0 = time.perf_counter()
    clf.fit(train, dev, labels=labels, progress=progress, **stack_args)
    seconds = time.perf_counter() - t0
    extra: dict[str, Any] = {"train_seconds": round(seconds, 1), "label_field": label_field}
    scores = None
    if dev:
        # a stacker learned on dev is scored out of fold (each record by the stacker of the
        # other folds): its dev figures are not read off the records it learned
        probs = trained(clf.tuning_scores_, f"classifier {clf.name!r}") \
            if isinstance(clf, SubjectStackClassifier) else clf.predict_proba(dev)
        scores = report(clf.label_set.matrix(dev), clf.decide(probs), clf.label_set.labels,
                        [ex.language for ex in dev])
        extra["dev_scores"] = {k: scores[k] for k in ("n", "micro_f1", "macro_f1",
                                                      "by_language")}
    clf.save(folder, extra)
    return ClassifierTraining(clf, seconds, scores,
                              len(stack_args.get("held_out_examples", ())))


def _feed_stack(clf: SubjectStackClassifier, project: Project, train: Sequence[Example],
                dev: Sequence[Example] | None, dev_records: Mapping[str, Record] | None,
                progress: ProgressCallback | None) -> dict[str, Any]:
    """Bind the subject project's vocabulary, fill the dev examples with its suggestions
    and return the stack's `fit` arguments: the project's place and its held-out records."""
    depth = clf.config.top_k
    clf.bind(project.vocab)
    if dev:
        check_held_out(project, dev)
        what = f"subjects of {project.path.name}"
        if progress is not None:
            progress(what, 0, len(dev))
        suggest_into(project, dev, depth, dev_records, on_batch=None if progress is None
                     else lambda done, total: progress(what, done, total))
    held = held_out_examples(project, train, depth) if clf.config.held_out else []
    if held:
        logger.info("%d training records the subject project held out join the stacker's "
                    "records (the text model does not learn from them)", len(held))
    elif clf.config.held_out:
        logger.info("the subject project keeps no held-out evidence: the stacker learns "
                    "from the dev records alone")
    return {"subjects_project": project.path, "held_out_examples": held}
