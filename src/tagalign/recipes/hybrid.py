"""`hybrid` — tagalign's default recipe: sources fused by a learned ranker.

Sources (``tagalign.suggest.sources``): Omikuji label trees on TF-IDF (per language),
record neighbours by TF-IDF and by bilingual contrastive embeddings, label retrieval in
the embedding space, and lexical label matches; with ``domains=true`` also the record's
predicted subject domains against each candidate's domain profile (features only, see
``tagalign.classify.source``). Training is stacked: the sources learn
from split A of train, the LightGBM ranker learns from their candidates on the held-out
split B (never dev); then B joins the neighbour memory and the label trees are refit on
A+B. Every phase is saved in ``workdir`` so an interrupted run resumes.

With ``quality=true`` (the default) the recipe also learns a per-record quality estimate
(`tagalign.suggest.quality`) on split B. The ranker learns from B too, so the estimator is
cross-fitted: B's records are split into ``quality_folds`` folds, each fold's candidates are
scored by a ranker trained (same settings) on the other folds only, and the estimator learns
from those out-of-fold scores and B's gold subjects. Every score it sees is one a ranker gave
a record it never trained on — as the final ranker (trained on all of B) does at suggest
time — so it learns the ranker's real errors, not its fit to its own training records.
"""

from __future__ import annotations

import copy
import gc
import importlib
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import scipy.sparse as sp
from rich.progress import track

from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.io import load_csr, read_json, save_csr_atomic, save_npy_atomic, write_json_atomic
from tagalign.recipes.base import (
    ReadOnlyError,
    Recipe,
    SearchSpace,
    TrialRun,
    read_only_message,
    register_recipe,
)
from tagalign.records import Record
from tagalign.suggest import Quality, Suggestion
from tagalign.suggest.agreement import CoAssignment
from tagalign.suggest.fusion import FusionRanker, top_k
from tagalign.suggest.pipeline import HybridPipeline
from tagalign.suggest.quality import CandidateProfile, QualityEstimator, cross_fitted_scores
from tagalign.suggest.sources import SOURCES, Source
from tagalign.suggest.sources.base import record_languages
from tagalign.suggest.sources.memory import RecordMemory, label_matrix
from tagalign.text import Analyzer
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.vocab import Vocabulary

if TYPE_CHECKING:
    from tagalign.train.phases import PhaseRunner

T = TypeVar("T")
EMBEDDING_SOURCES = {"emb_knn", "labels"}
#: sources with a candidate count (``top_k``) that may change after training
TOP_K_SOURCES = ("omikuji", "tfidf_knn", "emb_knn", "labels")
#: the widest candidate count `tagalign hyperopt` tries per source
MAX_TUNED_CANDIDATES = 60
#: sources registered by another package, imported only when a project uses them (the
#: domain classifier's package loads torch, which a hybrid without it does not need)
SOURCE_MODULES = {"domains": "tagalign.classify.source"}


@dataclass
class Stage:
    """Sources fitted on split A, and split B kept for the ranker."""

    pipeline: HybridPipeline
    ranker_records: list[Record]
    records: list[Record]
    tokens: list[list[str]]
    languages: list[str]


@dataclass
class FeatureTable:
    """Every candidate of some records with its features and gold label (0/1)."""

    rows: np.ndarray
    cols: np.ndarray
    X: np.ndarray
    y: np.ndarray
    names: list[str]
    support: np.ndarray


def feature_table(pipe: HybridPipeline, records: Sequence[Record], batch_size: int = 512,
                  description: str = "ranker candidates") -> FeatureTable:
    parts = []
    names: list[str] = []
    for start in track(range(0, len(records), batch_size), description=description,
                       transient=True):
        chunk = records[start:start + batch_size]
        rows, cols, X, names, support = pipe.features(pipe.prepare(chunk))
        gold = label_matrix(chunk, pipe.vocab)
        parts.append((rows + start, cols, X, np.asarray(gold[rows, cols]).ravel(), support))
    if not parts:
        raise ValueError("no records to build features from")
    rows, cols, X, y, support = (np.concatenate([p[i] for p in parts]) for i in range(5))
    return FeatureTable(rows, cols, X, y, names, support)


@dataclass
class TrainContext:
    """What sources learn from: one split of the training records, featurised."""

    vocab: Vocabulary
    analyzer: Analyzer
    memory: RecordMemory
    tfidf: dict[str, tuple[np.ndarray, sp.csr_matrix]]
    Y: sp.csr_matrix
    embeddings: np.ndarray | None = None
    encoder: Any = None
    #: the split's records and their tokens (the `domains` source learns their domains)
    records: Sequence[Record] = ()
    tokens: list[list[str]] | None = None
    #: loading only: sources map their large arrays from the files (read-only)
    mmap: bool = False


def in_holdout(record_id: str, fraction: float, seed: int) -> bool:
    """Stable split by a hash of the id, so reruns and resumes pick the same records."""
    return zlib.crc32(f"{seed}:{record_id}".encode()) % 10_000 < fraction * 10_000


def subject_prior(Y: sp.csr_matrix) -> np.ndarray:
    """log relative frequency of each subject among training records (feature ``prior``)."""
    counts = np.asarray(Y.sum(axis=0)).ravel()
    return np.log((counts + 1.0) / (Y.shape[0] + 1.0)).astype(np.float32)


@register_recipe
class HybridRecipe(Recipe):
    name = "hybrid"
    defaults: dict[str, Any] = {
        "sources": ["omikuji", "tfidf_knn", "emb_knn", "labels", "lexical"],
        "holdout_fraction": 0.15,
        "max_ranker_records": 12_000,
        "seed": 13,
        "knn_k": 30,
        "knn_power": 2.0,
        # TF-IDF neighbours: terms in more than this share of the records leave the product
        # and come back for the `knn_rescore` best (`TfidfNeighbours`; 0: exact search)
        "knn_prune_df": 0.05,
        "knn_rescore": 300,
        "ann_index": "ivf",
        "candidates_per_source": 30,
        "omikuji_cluster_k": 100,
        "omikuji_max_depth": 3,
        "refit_full": True,
        "embed_dim": 256,
        "embed_vocab_size": 40_000,
        "embed_epochs": 1,
        "embed_batch_size": 256,
        "embed_lr": 0.05,
        "embed_label_pairs": True,
        "ranker_rounds": 500,
        # agreement features: co-assignment with the record's `agreement_top_m` strongest
        # candidates (`tagalign.suggest.agreement`; issue 18)
        "agreement": True,
        "agreement_top_m": 10,
        # German labels of subjects without an English one, looked for in English texts
        "lexical_cross_language": False,
        # the per-record quality estimate, cross-fitted on split B (see the module docstring)
        "quality": True,
        "quality_folds": 3,
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
        "threads": 0,
    }

    def __init__(self, vocab: Vocabulary, **params: Any):
        super().__init__(vocab, **params)
        for name in set(self.source_names) & set(SOURCE_MODULES) - set(SOURCES):
            importlib.import_module(SOURCE_MODULES[name])
        unknown = set(self.source_names) - set(SOURCES)
        if unknown:
            raise ValueError(f"unknown sources {sorted(unknown)}; known: {sorted(SOURCES)}")
        self.pipeline_: HybridPipeline | None = None
        self._lock = threading.Lock()
        self.timings_: dict[str, dict[str, float]] = {}

    # -- construction ----------------------------------------------------------------------
    def _candidates(self, name: str) -> int:
        return self.params.get(f"candidates_{name}") or self.params["candidates_per_source"]

    def _new_source(self, name: str) -> Source:
        p = self.params
        k = self._candidates(name)
        kwargs: dict[str, dict[str, Any]] = {
            "omikuji": {"top_k": k, "cluster_k": p["omikuji_cluster_k"],
                        "max_depth": p["omikuji_max_depth"], "n_threads": p["threads"]},
            "tfidf_knn": {"k": p["knn_k"], "power": p["knn_power"], "top_k": k,
                          "prune_df": p["knn_prune_df"], "rescore": p["knn_rescore"]},
            "emb_knn": {"k": p["knn_k"], "power": p["knn_power"], "top_k": k,
                        "index": p["ann_index"]},
            "labels": {"top_k": k, "index": p["ann_index"]},
            "lexical": {"cross_language": p["lexical_cross_language"]},
            "domains": {"labels": p["domain_labels"], "limit_train": p["domain_limit_train"],
                        "seed": p["seed"]},
        }
        return SOURCES[name](**kwargs.get(name, {}))

    @property
    def source_names(self) -> list[str]:
        """``sources``, plus ``domains`` when the ``domains`` parameter is on."""
        names = list(self.params["sources"])
        return names + ["domains"] if self.params["domains"] and "domains" not in names \
            else names

    @property
    def uses_embeddings(self) -> bool:
        return bool(EMBEDDING_SOURCES & set(self.params["sources"]))

    # -- training --------------------------------------------------------------------------
    def fit(self, records: Sequence[Record], *, workdir: Path,
            dev: Sequence[Record] | None = None) -> None:
        # training only: suggesting with a trained hybrid never enters tagalign.train
        from tagalign.train.phases import PhaseRunner

        runner = PhaseRunner(workdir)
        stage = self.stack(records, runner)
        pipe = stage.pipeline
        tables: list[FeatureTable] = []  # split B's table, built once when a phase needs it

        def table() -> FeatureTable:
            if not tables:
                tables.append(feature_table(pipe, stage.ranker_records))
            return tables[0]

        pipe.ranker = runner.run("ranker", lambda: self._fit_ranker(table()),
                                 lambda r, d: r.save(d), FusionRanker.load)
        pipe.ranker.compile = True  # the ranker that suggests: compiled trees for batches
        if self.params["quality"]:  # before B joins the memory: B's features stay held-out
            pipe.quality = runner.run(
                "quality", lambda: self._fit_quality(table(), stage.ranker_records),
                lambda q, d: q.save(d), QualityEstimator.load)
            runner.log("quality feature importance (gain, recall): " + ", ".join(
                f"{k}={v:.3f}" for k, v in sorted(pipe.quality.importance().items(),
                                                  key=lambda kv: -kv[1])[:8]))
        runner.log("ranker feature importance (gain): " + ", ".join(
            f"{k}={v:.3f}" for k, v in sorted(pipe.ranker.importance().items(),
                                              key=lambda kv: -kv[1])[:12]))
        runner.step("add held-out records to memory",
                    lambda: self._learn(pipe, stage.ranker_records))
        tables.clear()  # split B's candidate table: the refit below peaks without it
        if self.params["refit_full"] and "omikuji" in self.params["sources"]:
            self._refit_omikuji(pipe, runner, stage)
        pipe.prior = subject_prior(pipe.memory.Y)
        if pipe.co is not None:  # suggesting: co-assignments of all training records
            pipe.co = CoAssignment.from_labels(pipe.memory.Y)
        pipe.prior_weight = self.params["prior_weight"]
        pipe.support_weight = self.params["support_weight"]
        self.pipeline_ = pipe
        self.timings_ = runner.timings

    def stack(self, records: Sequence[Record], runner: PhaseRunner) -> Stage:
        """Split train into A/B and fit every source on A (the first half of stacking)."""
        p = self.params
        analyzer = Analyzer()
        records = [r for r in records if r.subjects]
        langs = record_languages(records)
        hold = np.array([in_holdout(r.id, p["holdout_fraction"], p["seed"]) for r in records])
        idx_b = np.flatnonzero(hold)[: p["max_ranker_records"]]
        idx_a = np.setdiff1d(np.arange(len(records)), idx_b)
        if len(idx_b) < 20 or len(idx_a) < 20:
            raise ValueError(f"hybrid needs more training records (got {len(records)})")
        runner.log(f"{len(idx_a)} records train the sources, {len(idx_b)} the ranker")
        tokens = runner.step("tokenise", lambda: [
            analyzer.tokens(r.text, lg) for r, lg in track(
                list(zip(records, langs, strict=True)), description="tokenising",
                transient=True)])
        rec_a = [records[i] for i in idx_a]
        featurizer = runner.run(
            "tfidf", lambda: TfidfFeaturizer().fit([tokens[i] for i in idx_a],
                                                   [langs[i] for i in idx_a]),
            lambda f, d: f.save(d), TfidfFeaturizer.load)
        encoder = None
        if self.uses_embeddings:
            from tagalign.train.static_model import train_static_encoder

            encoder = runner.run(
                "encoder", lambda: train_static_encoder(rec_a, self.vocab, p),
                lambda e, d: e.save(d), StaticEmbeddingEncoder.load)
        ctx = TrainContext(
            self.vocab, analyzer,
            RecordMemory.from_records(rec_a, self.vocab, [langs[i] for i in idx_a]),
            featurizer.transform([tokens[i] for i in idx_a], [langs[i] for i in idx_a]),
            Y=label_matrix(rec_a, self.vocab), encoder=encoder, records=rec_a,
            tokens=[tokens[i] for i in idx_a])
        if encoder is not None:
            ctx.embeddings = runner.step("embed records", lambda: encoder.encode(
                [r.text for r in rec_a], show_progress=True))
        sources = []
        for name in self.source_names:
            src = self._new_source(name)
            sources.append(runner.run(
                f"source-{name}", lambda s=src: (s.fit(ctx), s)[1], lambda s, d: s.save(d),
                lambda d, s=src: (s.load_state(d, ctx), s)[1]))
        pipe = HybridPipeline(self.vocab, analyzer, featurizer, ctx.memory, sources, encoder,
                              prior=subject_prior(ctx.Y))
        if p["agreement"]:  # from split A only: the ranker's records are not in it
            pipe.co = CoAssignment.from_labels(ctx.Y)
            pipe.co_top_m = p["agreement_top_m"]
        return Stage(pipe, [records[i] for i in idx_b], records, tokens, langs)

    def _refit_omikuji(self, pipe: HybridPipeline, runner: PhaseRunner, stage: Stage) -> None:
        ctx = TrainContext(self.vocab, pipe.analyzer, pipe.memory,
                           pipe.featurizer.transform(stage.tokens, stage.languages),
                           label_matrix(stage.records, self.vocab))
        # the split-A trees go first: the refit peaks (about 0.5 GB of trees in full
        # training) without them (issue 18: training peak RSS)
        at = [s.name for s in pipe.sources].index("omikuji")
        pipe.sources = [s for s in pipe.sources if s.name != "omikuji"]
        gc.collect()
        src = self._new_source("omikuji")
        src = runner.run("source-omikuji-full", lambda: (src.fit(ctx), src)[1],
                         lambda s, d: s.save(d), lambda d: (src.load_state(d, ctx), src)[1])
        pipe.sources.insert(at, src)

    def _fit_ranker(self, table: FeatureTable, keep: np.ndarray | None = None
                    ) -> FusionRanker:
        """The ranker on the table's candidates (those of ``keep`` only, when given)."""
        sel = slice(None) if keep is None else keep
        return FusionRanker(num_rounds=self.params["ranker_rounds"],
                            num_threads=self.params["threads"]).fit(
            table.X[sel], table.y[sel], table.rows[sel], table.names)

    def _fit_quality(self, table: FeatureTable, records: Sequence[Record]) -> QualityEstimator:
        """Cross-fitted: out-of-fold ranker scores on B, then the estimator on all of B."""

        def fit_predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
            return self._fit_ranker(table, train).predict(table.X[test])

        scores = cross_fitted_scores(table.rows, self.params["quality_folds"],
                                     self.params["seed"], fit_predict)
        profile = CandidateProfile.build(table.rows, scores, table.X, table.names,
                                         table.support, len(records))
        n_gold = np.asarray(label_matrix(records, self.vocab).sum(axis=1)).ravel()
        return QualityEstimator(seed=self.params["seed"], num_threads=self.params["threads"]
                                ).fit(profile, table.y, n_gold)

    # -- online learning -------------------------------------------------------------------
    def _learn(self, pipe: HybridPipeline, records: Sequence[Record]) -> None:
        for start in range(0, len(records), self.params["batch_size"]):
            chunk = [r for r in records[start:start + self.params["batch_size"]] if r.subjects]
            if not chunk:
                continue
            batch = pipe.prepare(chunk)
            rows = pipe.memory.append(chunk, batch.languages, label_matrix(chunk, self.vocab))
            for src in pipe.sources:
                src.learn(batch, rows)

    def learn(self, records: Sequence[Record]) -> None:
        """Confirmed records join the neighbour memory at once (no retraining)."""
        if self.read_only:  # mapped indexes and matrices cannot grow
            raise ReadOnlyError(read_only_message("this hybrid model"))
        with self._lock:
            self._learn(self.pipeline_, records)

    # -- suggesting ------------------------------------------------------------------------
    def suggest(self, records: Sequence[Record], limit: int = 20) -> list[list[Suggestion]]:
        return self._in_batches(records, lambda part: self.pipeline_.suggest(part, limit))

    def suggest_with_quality(self, records: Sequence[Record], limit: int = 20,
                             threshold: float = 0.0
                             ) -> list[tuple[list[Suggestion], Quality | None]]:
        """As `suggest`, cut at ``threshold``, with the quality estimate of each list (None
        for a model saved before the hybrid had an estimator, or with ``quality=false``)."""
        return self._in_batches(records, lambda part: self.pipeline_.suggest_with_quality(
            part, limit, threshold))

    def _in_batches(self, records: Sequence[Record],
                    run: Callable[[Sequence[Record]], list[T]]) -> list[T]:
        """``run`` over ``records`` in pieces of ``batch_size``, results in order."""
        if self.pipeline_ is None:
            raise RuntimeError("hybrid recipe is not trained")
        bs = self.params["batch_size"]
        out: list[T] = []
        for start in range(0, len(records), bs):
            out.extend(run(records[start:start + bs]))
        return out

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
        return {name: self._candidates(name.removeprefix("candidates_"))
                if name.startswith("candidates_") else self.params[name]
                for name in self.search_space()}

    def trial_run(self, records: Sequence[Record], depth: int) -> TrialRun:
        """The sources run once, with `MAX_TUNED_CANDIDATES` each; a trial keeps each
        source's first k (`Candidates.truncate`, the same as running it with k), then only
        the features, the ranker and `blend` run again."""
        if self.pipeline_ is None:
            raise RuntimeError("hybrid recipe is not trained")
        pipe = self.pipeline_
        widest = []
        for src in pipe.sources:
            if src.name in TOP_K_SOURCES:  # a copy: the serving sources stay as they are
                src = copy.copy(src)
                src.top_k = max(MAX_TUNED_CANDIDATES, self._candidates(src.name))
            widest.append(src)
        bs = self.params["batch_size"]
        prepared = []
        for start in track(range(0, len(records), bs), description="candidates (once)",
                           transient=True):
            batch = pipe.prepare(records[start:start + bs])
            prepared.append((batch, [s.candidates(batch) for s in widest]))

        def run(trial: dict[str, Any]) -> list[list[tuple[str, float]]]:
            p = {**self.params, **trial}
            out: list[list[tuple[str, float]]] = []
            for batch, cands in prepared:
                cut = [c.truncate(p.get(f"candidates_{s.name}") or p["candidates_per_source"])
                       if s.name in TOP_K_SOURCES else c
                       for s, c in zip(pipe.sources, cands, strict=True)]
                rows, cols, X, names, support = pipe.features(batch, cut)
                scores = pipe.score(cols, X, support, p["prior_weight"], p["support_weight"],
                                    names)
                out.extend([[(self.vocab.subjects[c].id, s) for c, s, _ in row]
                            for row in top_k(rows, cols, scores, len(batch), depth)])
            return out

        return run

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: Path) -> None:
        pipe = self.pipeline_
        pipe.featurizer.save(path / "tfidf")
        pipe.memory.save(path / "memory")
        pipe.ranker.save(path / "ranker")
        if pipe.quality is not None:
            pipe.quality.save(path / "quality")
        save_npy_atomic(path / "prior.npy", pipe.prior)
        if pipe.co is not None:
            (path / "co").mkdir(parents=True, exist_ok=True)
            save_csr_atomic(path / "co", "cond", pipe.co.cond)
            write_json_atomic(path / "co" / "co.json", {"shape": list(pipe.co.cond.shape),
                                                        "top_m": pipe.co_top_m})
        if pipe.encoder is not None:
            pipe.encoder.save(path / "encoder")
        for src in pipe.sources:
            (path / "sources" / src.name).mkdir(parents=True, exist_ok=True)
            src.save(path / "sources" / src.name)
        write_json_atomic(path / "hybrid.json", {"sources": [s.name for s in pipe.sources],
                                                 "timings": self.timings_})

    @classmethod
    def load(cls, path: Path, vocab: Vocabulary, params: dict[str, Any], *,
             mmap: bool = False) -> HybridRecipe:
        """``mmap``: the record memory's label lists, the TF-IDF neighbours' record matrices
        and the `emb_knn` / `labels` vector indexes are mapped from their files (Omikuji's
        trees, the encoder and the ranker are read as usual: their libraries load whole)."""
        self = cls(vocab, **params)
        self.read_only = mmap
        meta = read_json(path / "hybrid.json")
        encoder = None
        if (path / "encoder").exists():
            encoder = StaticEmbeddingEncoder.load(path / "encoder")
        memory = RecordMemory.load(path / "memory", mmap=mmap)
        ctx = TrainContext(vocab, Analyzer(), memory, {}, memory.Y, encoder=encoder, mmap=mmap)
        sources = []
        for name in meta["sources"]:
            src = self._new_source(name)
            src.load_state(path / "sources" / name, ctx)
            sources.append(src)
        self.pipeline_ = HybridPipeline(
            vocab, ctx.analyzer, TfidfFeaturizer.load(path / "tfidf"), memory, sources, encoder,
            FusionRanker.load(path / "ranker"), np.load(path / "prior.npy", allow_pickle=False),
            prior_weight=self.params["prior_weight"], support_weight=self.params["support_weight"])
        self.pipeline_.ranker.compile = True
        if (path / "co").exists():  # models saved before issue 18 have no agreement features
            meta_co = read_json(path / "co" / "co.json")
            self.pipeline_.co = CoAssignment(load_csr(path / "co", "cond",
                                                      tuple(meta_co["shape"]), mmap=mmap))
            self.pipeline_.co_top_m = meta_co["top_m"]
        if (path / "quality").exists():  # models saved before the estimator load without it
            self.pipeline_.quality = QualityEstimator.load(path / "quality")
        self.timings_ = meta.get("timings", {})
        return self
