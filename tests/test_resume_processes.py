"""A training killed -9 and resumed in a new interpreter (issue 64): the new process, with
another hash seed, builds on what the killed one saved exactly as an uninterrupted process
would. `tests/test_phases.py` checks the same within one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: a fresh interpreter that trains a hybrid of params argv[2] (JSON) on the tiny records
#: into argv[1], resuming what is there; kill -9s itself right after phase argv[3] ("":
#: never); adds to file argv[4] a line for each Omikuji fit (its training file's hash,
#: its hyperparameters, threads: a file, as Omikuji's fit runs with fd 1 and 2 on
#: /dev/null) and, once trained, the model's ranking of other tiny records (ids, scores)
TRAIN = r"""
import hashlib, json, os, signal, sys
import tagalign.suggest.sources.omikuji as om
from tagalign.project import Project, Tagger
from tagalign.suggest import SuggestRequest
from tagalign.train.phases import PhaseRunner
from tiny_models import tiny_records, tiny_vocab

folder, params, stop, seen = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
real_train, real_run = om.omikuji.Model.train_on_data, PhaseRunner.run

def note(what):
    with open(seen, "a") as out:
        out.write(json.dumps(what) + "\n")

def train(path, hp, n_threads=None):
    with open(path, "rb") as fh:
        file = hashlib.sha256(fh.read()).hexdigest()
    note({"omikuji": [file, {k: getattr(hp, k) for k in dir(hp)}, n_threads,
                      os.environ.get("RAYON_NUM_THREADS"), len(os.sched_getaffinity(0))]})
    return real_train(path, hp, n_threads=n_threads)

def run(self, name, *args):
    value = real_run(self, name, *args)
    if name == stop:
        os.kill(os.getpid(), signal.SIGKILL)
    return value

om.omikuji.Model.train_on_data, PhaseRunner.run = train, run
Project.create(folder, tiny_vocab(), "hybrid", params).train(tiny_records(120))
ask = SuggestRequest(limit=8, threshold=0.0, quality=False)
note({"ranking": [[[s.id, s.score] for s in t.suggestions] for t in
                  Tagger(Project.load(folder)).tag(tiny_records(30, seed=2), ask)]})
"""


def _train(folder: Path, params: dict, stop: str, hash_seed: str) -> list[dict]:
    """What `TRAIN` noted, in a fresh interpreter of ``hash_seed`` (killed when ``stop``)."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    seen = Path(f"{folder}-{hash_seed}.jsonl")
    seen.touch()
    res = subprocess.run([sys.executable, "-c", TRAIN, str(folder), json.dumps(params), stop,
                          str(seen)], capture_output=True, text=True, env=env)
    assert res.returncode == (-9 if stop else 0), res.stderr[-2000:]
    return [json.loads(line) for line in seen.read_text().splitlines()]


def _omikuji(noted: list[dict]) -> list[list]:
    return [n["omikuji"] for n in noted if "omikuji" in n]


@pytest.fixture(scope="module")
def omikuji_straight(tmp_path_factory) -> list[list]:
    """What Omikuji was given in an uninterrupted training (once for both tests)."""
    from tiny_models import TINY_HYBRID

    return _omikuji(_train(tmp_path_factory.mktemp("straight") / "p", TINY_HYBRID, "", "1"))


@pytest.mark.parametrize("after", ["tfidf", "ranker"])
def test_a_resumed_process_gives_omikuji_what_an_uninterrupted_one_does(
        after, omikuji_straight, tmp_path):
    """A process resumed after kill -9 hands Omikuji the same training file, byte for
    byte, the same hyperparameters and the same threads as one never stopped: what is
    left to differ is Omikuji's own randomness (its trees are unseeded: two fits of one
    file differ in any process), which uninterrupted trainings draw just as much. Killed
    after ``tfidf``, the resumed process fits both Omikuji phases on a featurizer loaded
    from disk; after the ``ranker``, it loads split A's trees and refits the full ones."""
    from tiny_models import TINY_HYBRID

    straight = omikuji_straight
    assert len(straight) == 4  # split A's trees and the refit's, two languages each
    killed = _omikuji(_train(tmp_path / "p", TINY_HYBRID, after, "2"))
    assert killed == ([] if after == "tfidf" else straight[:2])
    resumed = _omikuji(_train(tmp_path / "p", TINY_HYBRID, "", "3"))
    assert resumed == (straight if after == "tfidf" else straight[2:])


#: every seeded part of the hybrid (no Omikuji): a static encoder, its neighbours, TF-IDF
#: neighbours, label matches, the ranker and the quality estimate
SEEDED = {"sources": ["tfidf_knn", "emb_knn", "lexical"], "ranker_rounds": 20,
          "holdout_fraction": 0.3, "embed_vocab_size": 300, "embed_dim": 16,
          "embed_batch_size": 32, "embed_label_pairs": False}


@pytest.fixture(scope="module")
def seeded_straight(tmp_path_factory) -> list[list]:
    noted = _train(tmp_path_factory.mktemp("seeded") / "p", SEEDED, "", "1")
    return noted[-1]["ranking"]


#: the first phase and the last before the model: killed after ``tfidf``, the resumed
#: process trains every later part (the encoder, its neighbours, the matcher, the ranker)
#: itself; after ``quality``, it loads them all from disk. The uninterrupted run is a
#: process of another hash seed too, so together they cover every part in both roles
#: (issue 46 covers every phase within one process)
@pytest.mark.parametrize("after", ["tfidf", "quality"])
def test_a_resumed_process_without_omikuji_ranks_as_an_uninterrupted_one(
        after, seeded_straight, tmp_path):
    """Without Omikuji a training killed -9 after any phase and resumed in a process of
    another hash seed ranks bit for bit (ids, scores) as one never stopped: no part
    depends on the process it ran in."""
    _train(tmp_path / "p", SEEDED, after, "2")
    assert (tmp_path / "p/work" / after / "phase.json").exists()
    assert _train(tmp_path / "p", SEEDED, "", "3")[-1]["ranking"] == seeded_straight
