"""Issue 63: every long step of a hybrid's training reports progress (with the time left,
when logged) — the ranker's and the quality estimate's boosting rounds, split B's
candidates, the lexical source's scans, Omikuji's languages — and reporting changes no
model."""

from __future__ import annotations

import logging

import numpy as np

from tagalign.encode.base import ProgressLog
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.fusion import FusionRanker
from tagalign.train.phases import PhaseRunner
from tagalign.train.stacking import HybridTrainer
from tiny_models import TINY_HYBRID, tiny_records, tiny_vocab


def _ranker_data(n_records: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n_records), 8)
    X = rng.normal(size=(len(rows), 3)).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.normal(size=len(rows)) > 0.8).astype(np.float32)
    return X, y, rows


def test_ranker_reports_its_rounds_and_is_the_same_model_with_progress():
    X, y, rows = _ranker_data()
    events: list[tuple[str, int, int]] = []
    plain = FusionRanker(num_rounds=40, early_stopping=40, num_threads=1).fit(
        X, y, rows, ["a", "b", "c"])
    heard = FusionRanker(num_rounds=40, early_stopping=40, num_threads=1).fit(
        X, y, rows, ["a", "b", "c"], progress=lambda *e: events.append(e), phase="ranker")
    assert heard._booster.model_to_string() == plain._booster.model_to_string()
    np.testing.assert_array_equal(heard.predict(X), plain.predict(X))
    rounds = heard._booster.current_iteration()
    assert events == [("ranker", k, 40) for k in range(rounds + 1)] + [("ranker", 40, 40)]


def test_ranker_stopped_early_still_ends_at_the_round_count():
    X, y, rows = _ranker_data(seed=1)
    events: list[tuple[str, int, int]] = []
    ranker = FusionRanker(num_rounds=400, early_stopping=2, num_threads=1).fit(
        X, y, rows, ["a", "b", "c"], progress=lambda *e: events.append(e))
    done = [d for _, d, _ in events]
    # it stopped early, after its best round: the last report still fills the bar
    assert ranker._booster.best_iteration <= done[-2] < 400 and done[-1] == 400
    assert done[:-1] == list(range(done[-2] + 1))
    assert {(p, t) for p, _, t in events} == {("ranker", 400)}


def _by_phase(events: list[tuple[str, int, int]]) -> dict[str, list[tuple[int, int]]]:
    phases: dict[str, list[tuple[int, int]]] = {}
    for phase, done, total in events:
        phases.setdefault(phase, []).append((done, total))
    return phases


def test_hybrid_training_reports_each_long_step(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tagalign")
    events: list[tuple[str, int, int]] = []
    config = HybridConfig.from_params(TINY_HYBRID)
    trainer = HybridTrainer(tiny_vocab(), config, threads=1,
                            progress=lambda *e: events.append(e))
    trainer.fit(tiny_records(120), PhaseRunner(tmp_path))
    phases = _by_phase(events)
    folds = config.estimator.folds
    assert set(phases) == {
        "split B's candidates", "ranker",
        *(f"quality fold {k}/{folds}" for k in range(1, folds + 1)), "quality recall",
        "quality precision", "lexical: labels", "lexical: label counts", "omikuji: languages"}
    for phase, seen in phases.items():
        # each run of a phase goes from 0 to its total, never back within the run
        runs: list[list[tuple[int, int]]] = [[]]
        for done, total in seen:
            if done == 0 and runs[-1]:
                runs.append([])
            runs[-1].append((done, total))
        for run in runs:
            done = [d for d, _ in run]
            assert done[0] == 0 and done == sorted(done), (phase, run)
            assert len({t for _, t in run}) == 1 and done[-1] == run[0][1], (phase, run)
    assert phases["ranker"][-1] == (config.ranker.num_rounds,) * 2
    assert phases["quality recall"][-1] == (config.estimator.num_rounds,) * 2
    assert phases["lexical: labels"][-1] == (len(tiny_vocab()),) * 2
    # split A's trees and their refit on A+B: two languages each
    assert phases["omikuji: languages"] == [(0, 2), (1, 2), (2, 2)] * 2
    said = [r.getMessage() for r in caplog.records if r.name.endswith("omikuji")]
    assert len(said) == 2 and all("subject assignments" in m and "2 language(s), 1 tree(s)"
                                  in m and "reports no progress" in m for m in said)


def test_training_logs_its_progress_by_default(caplog):
    """Without a callback, the trainer's progress is logged with the time left (what `tagalign
    train` shows): `ProgressLog`, one `log_progress` clock per phase."""
    caplog.set_level(logging.INFO, logger="tagalign")
    trainer = HybridTrainer(tiny_vocab(), HybridConfig.from_params(TINY_HYBRID))
    assert isinstance(trainer.progress, ProgressLog)
    logged = ProgressLog(logging.getLogger("tagalign.test"), every=0.0)
    logged("ranker", 0, 40)
    logged("ranker", 10, 40)
    message = caplog.records[-1].getMessage()
    assert message.startswith("ranker: 10/40 (") and message.endswith(" left)")
