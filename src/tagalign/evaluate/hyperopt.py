"""Annif's ``hyperopt``: tune a trained recipe's suggest-time parameters with Optuna.

The recipe declares what may change without retraining (`Recipe.search_space`) and
prepares the records once (`Recipe.trial_run`), so a trial costs the fusion and scoring
only. Optuna's TPE sampler is seeded; a study kept in ``storage`` (``sqlite:///study.db``)
continues where an interrupted run stopped: a rerun adds only the missing trials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tagalign.errors import MissingExtraError

try:  # an extra: only `tagalign hyperopt` imports this module
    import optuna
except ImportError as exc:
    raise MissingExtraError("tagalign hyperopt", "optuna", "tune") from exc

from tagalign.errors import InputError
from tagalign.evaluate.metrics import DEFAULT_KS, group_metrics
from tagalign.evaluate.selection import ScoredHits, selection_metrics
from tagalign.recipes import Recipe, SearchSpace
from tagalign.records import Record

#: rankings are this deep in every trial (the task's largest k)
DEPTH = max(DEFAULT_KS)


def _avg_recall(gold: list[set[str]], ranked: list[list[tuple[str, float]]]) -> float:
    return group_metrics(gold, [[sid for sid, _ in row] for row in ranked])["avg_recall"]


def _f1_at_5(gold: list[set[str]], ranked: list[list[tuple[str, float]]]) -> float:
    return group_metrics(gold, [[sid for sid, _ in row] for row in ranked], (5,))["f1@5"]


def _ndcg(gold: list[set[str]], ranked: list[list[tuple[str, float]]]) -> float:
    return selection_metrics(ScoredHits.build(gold, ranked, DEPTH), DEPTH, 0.0)["NDCG"]


#: ``--metric`` → score of rankings: the task's avg R@5..20 and F1@5, Annif's NDCG
METRICS: dict[str, Callable[[list[set[str]], list[list[tuple[str, float]]]], float]] = {
    "avg_recall": _avg_recall,
    "f1@5": _f1_at_5,
    "ndcg": _ndcg,
}


@dataclass
class StudyResult:
    study: optuna.Study
    metric: str
    #: seconds per trial run in this call (not those loaded from the storage)
    seconds: list[float] = field(default_factory=list)
    #: the metric at the recipe's current parameters (trial 0 of a new study)
    baseline: float | None = None

    @property
    def best_params(self) -> dict[str, Any]:
        return dict(self.study.best_params)

    @property
    def best_value(self) -> float:
        return float(self.study.best_value)


@dataclass(frozen=True)
class StudyPlan:
    """What a study tunes, checked once (`plan_study`): the recipe, its search space
    (name → ``(low, high, "int" | "float")``), the records with gold subjects, the metric."""

    recipe: Recipe
    space: SearchSpace
    records: list[Record]
    metric: str


def plan_study(recipe: Recipe, records: Sequence[Record], metric: str = "avg_recall", *,
               where: object = None) -> StudyPlan:
    """The checked inputs of `run_study`: `InputError` for an unknown ``metric``, a recipe
    without tunable parameters or no record with gold subjects (``where``: the records'
    file, named in that message)."""
    if metric not in METRICS:
        raise InputError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    space = recipe.search_space()
    if not space:
        raise InputError(f"recipe {recipe.name!r} has no tunable parameters: nothing to "
                         "optimise")
    kept = [r for r in records if r.subjects]
    if not kept:
        raise InputError(f"no record{f' in {where}' if where else ''} has gold subjects: "
                         "nothing to tune on")
    return StudyPlan(recipe, space, kept, metric)


def run_study(plan: StudyPlan, *, trials: int, jobs: int = 1, storage: str | None = None,
              study_name: str = "tagalign", seed: int = 0,
              on_trial: Callable[[optuna.trial.FrozenTrial, float], None] | None = None
              ) -> StudyResult:
    """Tune ``plan.space`` on ``plan.records`` for ``plan.metric`` until the study holds
    ``trials`` finished trials. A new study's first trial is the recipe's current
    parameters, so the best is never worse than what it had."""
    recipe, space, records, metric = plan.recipe, plan.space, plan.records, plan.metric
    gold = [set(r.subjects) for r in records]
    run = recipe.trial_run(records, DEPTH)
    score = METRICS[metric]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize",
                                load_if_exists=True)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    # the seed moves on with the trials held, or a resumed study would replay the random
    # start-up trials it already ran
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
    result = StudyResult(study, metric)
    if not study.trials:
        study.enqueue_trial(recipe.tuned_values())

    def objective(trial: optuna.Trial) -> float:
        values = {name: (trial.suggest_int(name, int(low), int(high)) if kind == "int"
                         else trial.suggest_float(name, float(low), float(high)))
                  for name, (low, high, kind) in space.items()}
        start = time.perf_counter()
        value = score(gold, run(values))
        result.seconds.append(time.perf_counter() - start)
        if trial.number == 0:
            result.baseline = value
        return value

    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if on_trial is not None and trial.value is not None:
            on_trial(trial, study.best_value)

    remaining = max(0, trials - len(done))
    if remaining:
        study.optimize(objective, n_trials=remaining, n_jobs=jobs, callbacks=[callback])
    return result
