"""`hybrid` — tagalign's default recipe: sources fused by a learned ranker.

Sources (``tagalign.suggest.sources``): Omikuji label trees on TF-IDF (per language),
record neighbours by TF-IDF and by bilingual contrastive embeddings, label retrieval in
the embedding space, and lexical label matches; with ``domains=true`` also the record's
predicted subject domains against each candidate's domain profile (features only, see
``tagalign.classify.source``). Training is stacked (`tagalign.train.stacking`): the
sources learn from split A of train, the LightGBM ranker from their candidates on the
held-out split B, the quality estimate cross-fitted on B. What suggests is a
`HybridPipeline` (`tagalign.suggest.pipeline`), which saves and loads its own parts.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tagalign.errors import NotTrainedError
from tagalign.io import atomic_dir, read_json
from tagalign.recipes.base import (
    ReadOnlyError,
    Recipe,
    SearchSpace,
    TrialRun,
    read_only_message,
    register_recipe,
)
from tagalign.records import Record
from tagalign.runtime import Runtime
from tagalign.suggest import Suggestion, SuggestRequest, Tagged
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.held_out import FOLDER as HELD_OUT
from tagalign.suggest.held_out import HeldOutEvidence
from tagalign.suggest.pipeline import HybridPipeline
from tagalign.suggest.sources import SOURCES
from tagalign.suggest.sources.base import NewHeadings
from tagalign.vocab import Vocabulary
from tagalign.vocab.changes.apply import VocabularyUpdate

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tagalign.train.stacking import HybridTrainer

#: sources with a candidate count (``top_k``) that may change after training
TOP_K_SOURCES = ("omikuji", "tfidf_knn", "emb_knn", "labels")
#: the widest candidate count `tagalign hyperopt` tries per source
MAX_TUNED_CANDIDATES = 60
# a source registered by another package, imported only when a project uses it (the
# domain classifier's package loads torch, which a hybrid without it does not need)
SOURCES.add_lazy("domains", "tagalign.classify.source")


@register_recipe
class HybridRecipe(Recipe):
    name = "hybrid"
    #: its defaults and ranges are derived from `HybridConfig` (`tagalign.suggest.config`):
    #: each default is written once, on its part's field; the names are those saved since
    #: before that config; ``self.config`` is built from the parameters (`ModelFamily`)
    config_class = HybridConfig
    config: HybridConfig
    #: threads are the runtime's (`tagalign.runtime.Runtime`), not a model parameter
    retired = frozenset({"threads"})
    #: a model saved before the unseen lift served its ranker's scores without it; one
    #: saved before the per-subject neighbour or the label-anchor features computes none
    #: (its ranker reads none of them)
    introduced = {"unseen_weight": 0.0, "knn_subject_records": 0, "labels_anchors": 0}

    def __init__(self, vocab: Vocabulary, **params: Any):
        super().__init__(vocab, **params)
        for name in self.source_names:  # unknown: an error naming the known ones
            SOURCES.lookup(name)
        self.pipeline_: HybridPipeline | None = None
        self._lock = threading.Lock()
        self.timings_: dict[str, dict[str, float]] = {}
        #: split B's held-out evidence: in memory after `fit`, read from ``model_path_``
        #: on request after `load` (suggesting never needs it)
        self.held_out_: HeldOutEvidence | None = None
        self.model_path_: Path | None = None

    @property
    def source_names(self) -> list[str]:
        """``sources``, plus ``domains`` when the ``domains`` parameter is on."""
        return self.config.source_names

    @property
    def uses_embeddings(self) -> bool:
        return self.config.uses_embeddings

    def set_runtime(self, runtime: Runtime) -> None:
        super().set_runtime(runtime)
        if self.pipeline_ is not None:
            self.pipeline_.runtime = runtime
            ranker = self.pipeline_.ranker
            if runtime.compile_ranker and ranker is not None and ranker.compiled_ is None:
                ranker.compile(runtime.cache_dir)

    @property
    def pipeline(self) -> HybridPipeline:
        """The trained pipeline (`NotTrainedError` before `fit` or `load`)."""
        if self.pipeline_ is None:
            raise NotTrainedError("this hybrid recipe")
        return self.pipeline_

    # -- training --------------------------------------------------------------------------
    def trainer(self) -> HybridTrainer:
        """What trains this recipe's pipeline (`tagalign.train.stacking.HybridTrainer`)."""
        # training only: suggesting with a trained hybrid never enters tagalign.train
        from tagalign.train.stacking import HybridTrainer

        return HybridTrainer(self.vocab, self.config, self.runtime.threads)

    def fit(self, records: Sequence[Record], *, workdir: Path) -> None:
        # training only, as `trainer`
        from tagalign.train.phases import PhaseRunner, inputs_fingerprint

        # finished phases in ``workdir`` are reused only when fitted on these same inputs
        runner = PhaseRunner(workdir, inputs=inputs_fingerprint(
            records, self.vocab.fingerprint, self.name, self.params))
        trainer = self.trainer()
        self.pipeline_ = trainer.fit(records, runner)
        self.held_out_ = trainer.held_out_
        self.timings_ = runner.timings
        self.set_runtime(self.runtime)

    # -- online learning -------------------------------------------------------------------
    def learn(self, records: Sequence[Record]) -> None:
        """Confirmed records join the neighbour memory at once (no retraining)."""
        if self.read_only:  # mapped indexes and matrices cannot grow
            raise ReadOnlyError(read_only_message("this hybrid model"))
        with self._lock:
            self.pipeline.learn(records, self.config.batch_size)

    # -- vocabulary updates ----------------------------------------------------------------
    def check_vocabulary_update(self) -> None:
        """Every hybrid takes vocabulary changes, ``domains=true`` too: the ``domains``
        source keeps a domain classifier of records (no subject in it) and per-subject
        domain counts keyed by vocabulary position (`tagalign.classify.source`), which
        widen to the new positions as every per-subject part does (a new heading starts
        with no counts and borrows a profile by GND notation, as a heading no training
        record carried does); retired positions keep their rows and are never suggested."""

    def take_vocabulary(self, update: VocabularyUpdate) -> None:
        """The sources that know headings by their labels take the new and the corrected
        ones (`HybridPipeline.take_vocabulary`); a retired heading's evidence goes to its
        target at each suggestion (`Vocabulary.successors`)."""
        self.held_out_evidence()  # read now: saved again with the model
        new = update.new
        redirected = {new.position(sid): new.position(target)
                      for sid, (kind, target) in update.retired.items()
                      if kind == "redirected" and target is not None}
        with self._lock:
            self.pipeline.take_vocabulary(
                new, NewHeadings(update.added, update.relabelled), redirected)
            self.vocab = new

    # -- suggesting ------------------------------------------------------------------------
    def _suggest(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        return [row for rows in self._batches(records) for row in self.pipeline.rank(rows, limit)]

    def _answer(self, records: Sequence[Record], request: SuggestRequest) -> list[Tagged]:
        """The pipeline's answers (`HybridPipeline.suggest`: the quality estimate, with
        ``quality=false`` None; the neighbour records of its `tfidf_knn` and `emb_knn`
        searches), ``batch_size`` records at a time."""
        return [t for rows in self._batches(records)
                for t in self.pipeline.suggest(rows, request)]

    def held_out_evidence(self) -> HeldOutEvidence | None:
        """What the model says of the training records its ranker held out (split B),
        from models that never saw them; None for a model trained without it."""
        if self.held_out_ is None and self.model_path_ is not None:
            self.held_out_ = HeldOutEvidence.load(self.model_path_ / HELD_OUT)
        return self.held_out_

    def seen_record_ids(self) -> frozenset[str]:
        """The record memory's ids: every training record, and those learned since."""
        return frozenset(self.pipeline.memory.ids)

    def _batches(self, records: Sequence[Record]) -> list[Sequence[Record]]:
        """``records`` in pieces of ``batch_size`` (bounded memory per piece)."""
        bs = self.config.batch_size
        return [records[start:start + bs] for start in range(0, len(records), bs)]

    # -- tuning --------------------------------------------------------------------------
    def search_space(self) -> SearchSpace:
        """The candidate count of each source that has one, and the weights of
        `tagalign.suggest.fusion.blend`: all used at suggest time only."""
        space: SearchSpace = {f"candidates_{name}": (5, MAX_TUNED_CANDIDATES, "int")
                              for name in self.source_names if name in TOP_K_SOURCES}
        space["prior_weight"] = (-0.3, 0.3, "float")
        space["support_weight"] = (0.0, 1.0, "float")
        space["unseen_weight"] = (0.0, 2.0, "float")
        return space

    def tuned_values(self) -> dict[str, Any]:
        cfg = self.config
        return {name: cfg.candidate_count(name.removeprefix("candidates_"))
                if name.startswith("candidates_") else getattr(cfg, name)
                for name in self.search_space()}

    def trial_run(self, records: Sequence[Record], depth: int) -> TrialRun:
        """The sources run once, with `MAX_TUNED_CANDIDATES` each; a trial keeps each
        source's first k (`Candidates.truncate`, the same as running it with k), then the
        pipeline's one scoring function (`HybridPipeline.ranked`) runs again."""
        pipe = self.pipeline
        widest = []
        for src in pipe.sources:
            if src.name in TOP_K_SOURCES:  # a copy: the serving sources stay as they are
                src = copy.copy(src)
                top_k = max(MAX_TUNED_CANDIDATES, self.config.candidate_count(src.name))
                src.config = replace(src.config, **{"top_k": top_k})  # these have one
            widest.append(src)
        prepared = []
        for rows in self._batches(records):
            batch = pipe.prepare(rows)
            prepared.append((batch, [s.candidates(batch) for s in widest]))

        def run(trial: dict[str, Any]) -> list[list[tuple[str, float]]]:
            cfg = HybridConfig.from_params({**self.params, **trial})
            out: list[list[tuple[str, float]]] = []
            for batch, cands in prepared:
                cut = [c.truncate(cfg.candidate_count(s.name)) if s.name in TOP_K_SOURCES
                       else c for s, c in zip(pipe.sources, cands, strict=True)]
                ranked = pipe.ranked(batch, depth, cut, cfg.blend_weights)
                out.extend([[(self.vocab.subjects[c].id, s) for c, s, _ in row]
                            for row in ranked.top])
            return out

        return run

    def params_saved(self, folder: Path) -> None:
        """New `blend` weights (`tagalign hyperopt --save`): the quality estimator learns
        the scores now served, from the data it keeps, and is saved (atomically)."""
        pipe = self.pipeline
        if pipe.quality is not None and pipe.retune_quality():
            with atomic_dir(folder / "quality") as tmp:
                pipe.quality.save(tmp)
            log.info("quality estimate learned again for the new score weights")
        elif pipe.quality is not None and pipe.quality_in_force() is None:
            log.warning("this model's quality estimate learned other score weights and kept "
                        "no data to learn again: no estimates until the project is retrained")

    # -- persistence -----------------------------------------------------------------------
    def _save_state(self, path: Path) -> None:
        self.pipeline.save(path, {"timings": self.timings_})
        if self.held_out_ is not None:
            self.held_out_.save(path / HELD_OUT)

    def _load_state(self, path: Path, *, mmap: bool = False) -> None:
        """``mmap``: the record memory's label lists, the TF-IDF neighbours' record matrices
        and the `emb_knn` / `labels` vector indexes are mapped from their files (Omikuji's
        trees, the encoder and the ranker are read as usual: their libraries load whole)."""
        self.read_only = mmap
        self.pipeline_ = HybridPipeline.load(path, self.vocab, self.config,
                                             runtime=self.runtime, mmap=mmap)
        self.timings_ = read_json(path / "hybrid.json").get("timings", {})
        self.model_path_ = Path(path)
