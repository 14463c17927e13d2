"""Resumed training (`tagalign.train.phases`): a finished phase is reused only when it was
fitted on the same records, vocabulary and parameters (issue: fingerprinted phases)."""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace

import pytest

from tagalign.project import Project
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.train.phases import PhaseRunner
from tagalign.train.stacking import HybridTrainer
from tiny_models import KNN_LEXICAL_HYBRID, tiny_records, tiny_vocab


def test_phase_runner_reuses_only_a_phase_of_the_same_inputs(tmp_path, caplog):
    builds = []

    def run(runner: PhaseRunner, name: str, value: int) -> int:
        return runner.run(name, lambda: builds.append(name) or value,
                          lambda v, d: (d / "v").write_text(str(v)),
                          lambda d: int((d / "v").read_text()))

    first = PhaseRunner(tmp_path, inputs="a")
    assert run(first, "one", 1) == 1 and run(first, "two", 2) == 2
    same = PhaseRunner(tmp_path, inputs="a")
    assert run(same, "one", 10) == 1 and run(same, "two", 20) == 2
    assert builds == ["one", "two"]
    caplog.set_level(logging.WARNING, "tagalign.train.phases")
    other = PhaseRunner(tmp_path, inputs="b")
    assert run(other, "one", 10) == 10 and run(other, "two", 20) == 20
    assert builds == ["one", "two", "one", "two"]
    assert "one: inputs changed since it finished, recomputing" in caplog.text


def _interrupted(tmp_path, monkeypatch, records, params=KNN_LEXICAL_HYBRID) -> Project:
    """A project of ``params`` whose training stopped in the ranker, its sources finished."""
    proj = Project.create(tmp_path / "p", tiny_vocab(), "hybrid", params)

    def boom(self, table):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(HybridTrainer, "fit_ranker", boom)
        with pytest.raises(KeyboardInterrupt):
            proj.train(records)
    assert (tmp_path / "p/work/tfidf/phase.json").exists()
    return proj


def _count_tfidf_fits(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = TfidfFeaturizer.fit
    monkeypatch.setattr(TfidfFeaturizer, "fit",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


def test_rerun_on_other_records_recomputes_finished_phases(tmp_path, monkeypatch, caplog):
    proj = _interrupted(tmp_path, monkeypatch, tiny_records(120, seed=0))
    calls = _count_tfidf_fits(monkeypatch)
    caplog.set_level(logging.WARNING, "tagalign.train.phases")
    other = [replace(r, id=f"o{r.id}") for r in tiny_records(120, seed=1)]
    proj.train(other)
    assert calls == [1]  # fitted again on the new records, not resumed
    assert "tfidf: inputs changed since it finished, recomputing" in caplog.text
    assert set(proj.recipe.pipeline.memory.ids) <= {r.id for r in other}


def test_identical_rerun_resumes_finished_phases(tmp_path, monkeypatch):
    records = tiny_records(120, seed=0)
    proj = _interrupted(tmp_path, monkeypatch, records)
    calls = _count_tfidf_fits(monkeypatch)
    proj.train(records)
    assert calls == []  # the finished phase was reused
    assert (tmp_path / "p/model/recipe.json").exists()


PHASES = ["tfidf", "source-tfidf_knn", "source-lexical", "ranker", "held-out evidence"]


def _ranking(folder) -> list[list[tuple[str, float]]]:
    from tagalign.project import Tagger
    from tagalign.suggest import SuggestRequest

    ask = SuggestRequest(limit=8, threshold=0.0, quality=False)
    return [[(s.id, s.score) for s in t.suggestions]
            for t in Tagger(Project.load(folder)).tag(tiny_records(30, seed=2), ask)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[list[tuple[str, float]]]:
    folder = tmp_path_factory.mktemp("uninterrupted") / "p"
    Project.create(folder, tiny_vocab(), "hybrid", KNN_LEXICAL_HYBRID).train(
        tiny_records(120, seed=0))
    return _ranking(folder)


@pytest.mark.parametrize("after", PHASES)
def test_resumed_training_equals_an_uninterrupted_one(after, uninterrupted, tmp_path,
                                                       monkeypatch):
    """A phase loaded from disk serves later phases as the one kept in memory did: a run
    stopped after any phase and resumed suggests bit for bit as one never stopped (issue
    46; this recipe has no Omikuji, whose trees are unseeded)."""
    records = tiny_records(120, seed=0)
    proj = Project.create(tmp_path / "p", tiny_vocab(), "hybrid", KNN_LEXICAL_HYBRID)
    real = PhaseRunner.run

    def stop_after(self, name, *args):
        value = real(self, name, *args)
        if name == after:
            raise KeyboardInterrupt
        return value

    with monkeypatch.context() as m:
        m.setattr(PhaseRunner, "run", stop_after)
        with pytest.raises(KeyboardInterrupt):
            proj.train(records)
    assert (tmp_path / "p/work" / after / "phase.json").exists()
    proj.train(records)
    assert _ranking(tmp_path / "p") == uninterrupted



def test_each_phase_records_the_peak_memory_it_reached(tmp_path):
    """A phase's ``peak_gb`` is the process's peak RSS so far (Linux VmHWM): a phase that
    allocates more than any before it raises it, so the phase that sets a training's peak
    is the first with the highest figure (issue 48). In a fresh process: this one's peak
    is the earlier tests'."""
    import json
    import subprocess
    import sys

    script = """
import json, sys
import numpy as np
from tagalign.train.phases import PhaseRunner
runner = PhaseRunner(sys.argv[1])
runner.step("small", lambda: None)
runner.step("big", lambda: int(np.ones(400 * 2**20 // 8).sum()))  # 400 MiB, then freed
runner.step("after", lambda: None)
print(json.dumps(runner.timings))
"""
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    t = json.loads(out.strip().splitlines()[-1])
    assert t["small"]["peak_gb"] >= t["small"]["rss_gb"] > 0
    assert t["big"]["peak_gb"] >= t["small"]["peak_gb"] + 0.4
    assert t["big"]["rss_gb"] < t["big"]["peak_gb"] - 0.3  # freed: the peak stays
    assert t["after"]["peak_gb"] == t["big"]["peak_gb"]


#: the cheapest hybrid whose sources fit on the records' embeddings (`emb_knn`)
EMB_HYBRID = {**KNN_LEXICAL_HYBRID, "sources": ["tfidf_knn", "emb_knn"],
              "embed_vocab_size": 300, "embed_dim": 16, "embed_batch_size": 32,
              "embed_label_pairs": False}


@pytest.fixture(scope="module")
def emb_straight(tmp_path_factory) -> list[list[tuple[str, float]]]:
    """An `EMB_HYBRID` trained without a stop: its ranking of the tiny query records."""
    folder = tmp_path_factory.mktemp("emb_straight") / "p"
    Project.create(folder, tiny_vocab(), "hybrid", EMB_HYBRID).train(tiny_records(120, seed=0))
    timings = Project.load(folder).recipe.timings_
    assert "embed records" in timings and "source-emb_knn" in timings
    return _ranking(folder)


@pytest.mark.parametrize("lose_emb_knn", [False, True])
def test_records_are_embedded_only_for_a_source_still_to_fit(lose_emb_knn, emb_straight,
                                                             tmp_path, monkeypatch):
    """A training resumed after its sources finished does not embed split A's records
    again (a resumed 1M training spent 258 s on it, issue 48); one whose `emb_knn` phase
    is lost does, and fits it. Either way it suggests as a training never stopped."""
    records = tiny_records(120, seed=0)
    proj = _interrupted(tmp_path, monkeypatch, records, EMB_HYBRID)
    assert (tmp_path / "p/work/source-emb_knn/phase.json").exists()
    if lose_emb_knn:
        shutil.rmtree(tmp_path / "p/work/source-emb_knn")
    proj.train(records)
    timings = Project.load(tmp_path / "p").recipe.timings_
    assert ("embed records" in timings) is lose_emb_knn
    assert ("source-emb_knn" in timings) is lose_emb_knn
    assert _ranking(tmp_path / "p") == emb_straight


def test_record_embeddings_are_let_go_once_no_source_is_left_to_fit_on_them(tmp_path,
                                                                          monkeypatch):
    """The records' embeddings (1.5 GB at 1M) leave the fit context after the last source
    that fits on them (`emb_knn`, whose index holds its own copy): the sources after it
    fit without them (issue 48: a training's memory)."""
    from tagalign.suggest.sources.lexical import LabelMatcher
    from tagalign.suggest.sources.neighbours import EmbeddingNeighbours

    seen: dict[str, bool] = {}
    for cls in (EmbeddingNeighbours, LabelMatcher):
        def fit(self, ctx, _fit=cls.fit, _name=cls.name):
            seen[_name] = ctx.embeddings is not None
            return _fit(self, ctx)
        monkeypatch.setattr(cls, "fit", fit)
    params = {**EMB_HYBRID, "sources": ["emb_knn", "lexical"]}
    Project.create(tmp_path / "p", tiny_vocab(), "hybrid", params).train(
        tiny_records(120, seed=0))
    assert seen == {"emb_knn": True, "lexical": False}
