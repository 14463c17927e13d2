"""The unseen lift (issue 66: ``unseen_weight``, 0.75): `blend` adds a weight to the logit
of a candidate no training record carries, which the ranker (learning from split B,
whose gold split A mostly carries) scores too low; a model saved before the weight serves
without it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from suggesting import tag
from tagalign.project import Project
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.fusion import blend
from tagalign.suggest.pipeline import HybridPipeline
from tiny_models import TINY_HYBRID, tiny_records, tiny_vocab


def logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def test_only_the_unseen_logits_rise_by_the_weight():
    p = np.array([0.2, 0.2, 0.6, 0.9])
    prior = np.array([-5.0, -9.0, -9.0, -2.0], np.float32)  # -9: no training record
    n_sources = np.array([1, 1, 2, 3])
    lifted = blend(p, prior, n_sources, unseen_weight=1.25, unseen_prior=-9.0)
    np.testing.assert_allclose(logit(lifted) - logit(p), [0.0, 1.25, 1.25, 0.0], atol=1e-6)
    # beside the other corrections, added to them
    both = blend(p, prior, n_sources, 0.1, 0.5, 1.25, unseen_prior=-9.0)
    np.testing.assert_allclose(logit(both) - logit(p),
                               0.1 * prior + 0.5 * (n_sources - 1) + [0, 1.25, 1.25, 0],
                               atol=1e-5)
    assert blend(p, prior, n_sources, unseen_prior=-9.0) is p  # no weight: p itself
    with pytest.raises(ValueError, match="prior of an unseen subject"):
        blend(p, prior, n_sources, unseen_weight=1.0)


#: two of the tiny vocabulary's subjects no training record carries; the records whose
#: title is one of their labels stay (the lexical matcher proposes them from there)
NEVER = ("4068097-6", "4011455-7")


@pytest.fixture(scope="module")
def unseen_project(tmp_path_factory) -> Path:
    """A tiny hybrid trained on records without `NEVER` in their gold (with the default
    weights: the unseen lift's)."""
    records = [replace(r, subjects=[s for s in r.subjects if s not in NEVER])
               for r in tiny_records(160, seed=3)]
    folder = tmp_path_factory.mktemp("unseen") / "hybrid"
    Project.create(folder, tiny_vocab(), "hybrid", TINY_HYBRID).train(records)
    return folder


def ranked_pairs(pipe: HybridPipeline, weights) -> dict[tuple[int, int], float]:
    r = pipe.ranked(pipe.prepare(tiny_records(40, seed=4)), 50, weights=weights)
    return {(int(a), int(b)): float(s) for a, b, s in zip(r.rows, r.cols, r.scores,
                                                          strict=True)}


def test_the_pipeline_lifts_the_subjects_its_training_never_carried(unseen_project):
    pipe = Project.load(unseen_project).recipe.pipeline
    assert pipe.weights == HybridConfig().blend_weights == (0.0, 0.0, 0.75)
    plain = ranked_pairs(pipe, (0.0, 0.0, 0.0))
    lifted = ranked_pairs(pipe, (0.0, 0.0, 2.0))
    assert plain.keys() == lifted.keys()
    never = set(pipe.vocab.positions(NEVER))
    unseen = {key for key in plain if key[1] in never}
    assert unseen and len(unseen) < len(plain)  # both kinds among the candidates
    for key, score in plain.items():
        gain = logit(np.clip(lifted[key], 1e-7, 1 - 1e-7)) - logit(np.clip(score, 1e-7,
                                                                           1 - 1e-7))
        assert gain == pytest.approx(2.0 if key in unseen else 0.0, abs=1e-3), key
    # the served scores are the default weight's
    served = ranked_pairs(pipe, None)
    assert served == ranked_pairs(pipe, (0.0, 0.0, 0.75)) != plain


def test_a_model_saved_before_the_weight_serves_without_it(unseen_project, tmp_path):
    """Its manifest has no ``unseen_weight`` and its estimator learned the unlifted scores:
    it loads with 0, serves those scores and keeps its quality estimate."""
    folder = Path(shutil.copytree(unseen_project, tmp_path / "old"))
    plain = ranked_pairs(Project.load(folder).recipe.pipeline, (0.0, 0.0, 0.0))
    manifest = folder / "model" / "recipe.json"
    meta = json.loads(manifest.read_text())
    del meta["params"]["unseen_weight"]
    manifest.write_text(json.dumps(meta))
    quality = folder / "model" / "quality" / "quality.json"
    quality.write_text(json.dumps({**json.loads(quality.read_text()),
                                   "weights": [0.0, 0.0]}))  # as saved before
    old = Project.load(folder)
    pipe = old.recipe.pipeline
    assert pipe.unseen_weight == 0.0 and old.recipe.params["unseen_weight"] == 0.0
    assert ranked_pairs(pipe, None) == plain
    assert pipe.quality_in_force() is not None
    assert all(t.quality is not None for t in tag(old, tiny_records(5, seed=4), limit=3))


def test_the_weight_is_a_tuned_suggest_time_knob(unseen_project):
    recipe = Project.load(unseen_project).recipe
    assert recipe.search_space()["unseen_weight"] == (0.0, 2.0, "float")
    assert recipe.tuned_values()["unseen_weight"] == 0.75
