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
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from tagalign.encode.static import StaticEncoderConfig
from tagalign.errors import NotTrainedError
from tagalign.io import atomic_dir, read_json
from tagalign.params import (
    NonNegative,
    OpenFraction,
    Positive,
)
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
from tagalign.suggest.fusion import RankerConfig
from tagalign.suggest.held_out import FOLDER as HELD_OUT
from tagalign.suggest.held_out import HeldOutEvidence
from tagalign.suggest.pipeline import HybridPipeline, candidate_count
from tagalign.suggest.quality import QualityConfig
from tagalign.suggest.sources import SOURCES
from tagalign.suggest.sources.labels import LabelRetrievalConfig
from tagalign.suggest.sources.lexical import LabelMatcherConfig
from tagalign.suggest.sources.neighbours import EmbeddingNeighboursConfig, TfidfNeighboursConfig
from tagalign.suggest.sources.omikuji import OmikujiConfig
from tagalign.vocab import Vocabulary

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tagalign.train.stacking import HybridTrainer

EMBEDDING_SOURCES = {"emb_knn", "labels"}
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
    defaults: ClassVar[dict[str, Any]] = {
        "sources": ["omikuji", "tfidf_knn", "emb_knn", "labels", "lexical"],
        "holdout_fraction": 0.15,
        "max_ranker_records": 12_000,
        "seed": 13,
        "knn_k": 30,
        "knn_power": 2.0,
        # TF-IDF neighbours (`TfidfNeighbours`, `tagalign.index.sparse`): "product" scores
        # every record, the terms in more than `knn_prune_df` of them left out and added
        # back for the `knn_rescore` best (0: exact search); "impact" reads `knn_postings`
        # postings per query of an impact-ordered index and rescores the `knn_rescore` best
        # (for memories of a million records: docs/scaling.md); "auto": the product below
        # 200,000 training records, the impact search from there (`resolve_search`)
        "knn_search": "auto",
        "knn_prune_df": 0.05,
        # 20,000 since stop 61 (issue 48): the 1M + 1.5M-heading model tagged all dev 1.17x
        # faster with it and Omikuji's beam at 5, dev avg R 0.5196 either way
        "knn_postings": 20_000,
        "knn_rescore": 300,
        "ann_index": "ivf",
        "candidates_per_source": 30,
        "omikuji_cluster_k": 100,
        "omikuji_max_depth": 3,
        # trees per language: one, not Omikuji's three (issue 48, 90k dev avg R@5..20 0.6812
        # against three trees' 0.6758-0.6844 over four trainings; Omikuji's phases 239 s
        # against 367 s, tagging 13 % faster, 184 MiB less model; a 1M training within 2 h)
        "omikuji_n_trees": 1,
        # the nodes each tree level keeps while predicting (Omikuji's default; time is
        # about linear in it)
        "omikuji_beam_size": 10,
        # the label trees learn from a seeded sample of this many records at most (split
        # A's trees and the final ones each; None: all): their training time grows faster
        # than the records (issue 48: split A of 300k did not finish in 48 min; 90k
        # trainings are unchanged; docs/scaling.md)
        "omikuji_max_records": 100_000,
        # Omikuji's trees refit on all training records (split A and B) once the ranker is
        # trained; "auto": unless split A alone fills `omikuji_max_records` (a refit would
        # learn from another sample of the same size: 955 s of a 1M training for nothing;
        # the split-A trees, which the ranker learned on, serve). Every 90k training refits.
        "refit_full": "auto",
        "embed_dim": 384,
        "embed_vocab_size": 40_000,
        "embed_epochs": 3,
        "embed_batch_size": 256,
        "embed_lr": 0.05,
        "embed_label_pairs": True,
        # after the first epoch, each record ↔ label pair learns with this many mined hard
        # negatives (`tagalign.train.static_model.hard_negative_sets`; 0: in-batch only).
        # 384 dimensions and 1 hard negative: issue 33's fifth stop (docs/recipes.md)
        "embed_hard_negatives": 1,
        # the encoder learns from a seeded sample of this many of split A's records at most
        # (None: all; issue 48: a 1M-record training would spend hours here)
        "embed_max_records": 100_000,
        "ranker_rounds": 500,
        # agreement features: co-assignment with the record's `agreement_top_m` strongest
        # candidates (`tagalign.suggest.agreement`; issue 18)
        "agreement": True,
        "agreement_top_m": 10,
        # German labels of subjects without an English one, looked for in English texts
        "lexical_cross_language": True,
        # the lexical source's label counts (`lex_prec`) scan a seeded sample of at most
        # this many split-A records (None: all; issue 48: 657 s of a 1M training; every
        # 90k training counts all)
        "lexical_count_max_records": 200_000,
        # the per-record quality estimate, cross-fitted on split B (`tagalign.train.stacking`)
        "quality": True,
        "quality_folds": 3,
        # split B's out-of-fold lists and neighbour records, kept for domain models
        # (`tagalign.suggest.held_out`; issue 34)
        "held_out_evidence": True,
        "held_out_depth": 30,
        # suggest-time knobs (`tagalign hyperopt`, no retraining): per-source candidate
        # counts (None: candidates_per_source) and the score corrections of `fusion.blend`
        "candidates_omikuji": None,
        "candidates_tfidf_knn": None,
        "candidates_emb_knn": None,
        "candidates_labels": None,
        "prior_weight": 0.0,
        "support_weight": 0.0,
        # the `domains` source (predicted record domains vs each subject's domain profile)
        "domains": False,
        "domain_labels": None,
        "domain_limit_train": None,
        "batch_size": 1024,
    }
    ranges: ClassVar[dict[str, Any]] = {
        "holdout_fraction": OpenFraction, "seed": NonNegative,
        "refit_full": bool | Literal["auto"],
        **dict.fromkeys(("max_ranker_records", "candidates_per_source", "agreement_top_m",
                         "domain_limit_train", "batch_size"), Positive),
        # the sources' own (`knn_k`, `knn_power`, `omikuji_cluster_k` ...), declared beside
        # their settings; the `domains` source's loads torch: its two are above
        **TfidfNeighboursConfig.recipe_ranges(), **EmbeddingNeighboursConfig.recipe_ranges(),
        **OmikujiConfig.recipe_ranges(), **LabelRetrievalConfig.recipe_ranges(),
        **LabelMatcherConfig.recipe_ranges(),
        # the fusion ranker's, the quality estimate's, the encoder trainer's (``embed_*``)
        **RankerConfig.recipe_ranges(), **QualityConfig.recipe_ranges(),
        **StaticEncoderConfig.recipe_ranges(),
    }
    #: threads are the runtime's (`tagalign.runtime.Runtime`), not a model parameter
    retired = frozenset({"threads"})

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
        names = list(self.params["sources"])
        return names + ["domains"] if self.params["domains"] and "domains" not in names \
            else names

    @property
    def uses_embeddings(self) -> bool:
        return bool(EMBEDDING_SOURCES & set(self.params["sources"]))

    def set_runtime(self, runtime: Runtime) -> None:
        super().set_runtime(runtime)
        if self.pipeline_ is not None:
            self.pipeline_.runtime = runtime
            if runtime.compile_ranker and self.pipeline_.ranker.compiled_ is None:
                self.pipeline_.ranker.compile(runtime.cache_dir)

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

        return HybridTrainer(self.vocab, self.params, self.source_names, self.uses_embeddings,
                       self.runtime.threads)

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
            self.pipeline.learn(records, self.params["batch_size"])

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
        bs = self.params["batch_size"]
        return [records[start:start + bs] for start in range(0, len(records), bs)]

    # -- tuning --------------------------------------------------------------------------
    def search_space(self) -> SearchSpace:
        """The candidate count of each source that has one, and the weights of
        `tagalign.suggest.fusion.blend`: all used at suggest time only."""
        space: SearchSpace = {f"candidates_{name}": (5, MAX_TUNED_CANDIDATES, "int")
                              for name in self.source_names if name in TOP_K_SOURCES}
        space["prior_weight"] = (-0.3, 0.3, "float")
        space["support_weight"] = (0.0, 1.0, "float")
        return space

    def tuned_values(self) -> dict[str, Any]:
        return {name: candidate_count(self.params, name.removeprefix("candidates_"))
                if name.startswith("candidates_") else self.params[name]
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
                top_k = max(MAX_TUNED_CANDIDATES, candidate_count(self.params, src.name))
                src.config = replace(src.config, **{"top_k": top_k})  # these have one
            widest.append(src)
        prepared = []
        for rows in self._batches(records):
            batch = pipe.prepare(rows)
            prepared.append((batch, [s.candidates(batch) for s in widest]))

        def run(trial: dict[str, Any]) -> list[list[tuple[str, float]]]:
            p = {**self.params, **trial}
            out: list[list[tuple[str, float]]] = []
            for batch, cands in prepared:
                cut = [c.truncate(candidate_count(p, s.name)) if s.name in TOP_K_SOURCES else c
                       for s, c in zip(pipe.sources, cands, strict=True)]
                ranked = pipe.ranked(batch, depth, cut, p["prior_weight"], p["support_weight"])
                out.extend([[(self.vocab.subjects[c].id, s) for c, s, _ in row]
                            for row in ranked.top])
            return out

        return run

    def params_saved(self, folder: Path) -> None:
        """New `blend` weights (`tagalign hyperopt --save`): the quality estimator learns
        the scores now served, from the data it keeps, and is saved (atomically)."""
        pipe = self.pipeline
        if pipe.retune_quality():
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
        p = self.params
        self.pipeline_ = HybridPipeline.load(
            path, self.vocab, p, encoder=self.uses_embeddings, quality=p["quality"],
            agreement=p["agreement"], runtime=self.runtime, mmap=mmap)
        self.timings_ = read_json(path / "hybrid.json").get("timings", {})
        self.model_path_ = Path(path)
