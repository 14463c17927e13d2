"""Training the hybrid by stacking (what `tagalign.recipes.hybrid.HybridRecipe.fit` runs).

The sources learn from split A of train; the LightGBM ranker learns from their candidates
on the held-out split B (never dev); then B joins the neighbour memory and the label trees
are refit on A+B. Every phase is saved by a `PhaseRunner`, so an interrupted run resumes.

The quality estimator (`tagalign.suggest.quality`) is cross-fitted on B: B's records are
split into folds, each fold's candidates are scored by a ranker trained (same settings)
on the other folds only, and the estimator learns from those out-of-fold scores and B's
gold subjects — scores a ranker gave records it never trained on, as the final ranker
does at suggest time. Those out-of-fold lists, cut to ``held_out_depth``, and the
neighbour records A's memory gave each B record are kept as the model's held-out evidence
(`tagalign.suggest.held_out`): what a domain model stacked on the subjects learns from.
"""

from __future__ import annotations

import gc
import logging
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tagalign.encode.base import ProgressLog
from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.encode.texts import RecordTexts
from tagalign.records import Record
from tagalign.runtime import ProgressCallback
from tagalign.suggest.agreement import CoAssignment
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.fusion import FusionRanker, blend, top_k
from tagalign.suggest.held_out import HeldOutEvidence
from tagalign.suggest.pipeline import HybridPipeline
from tagalign.suggest.quality import (
    QualityData,
    QualityEstimator,
    cross_fitted_scores,
)
from tagalign.suggest.sources import SOURCES
from tagalign.suggest.sources.base import FitContext, Source, record_languages
from tagalign.suggest.sources.memory import RecordMemory, label_matrix
from tagalign.suggest.suggestion import Neighbours
from tagalign.text import Analyzer
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.train.phases import PhaseRunner
from tagalign.vocab import Vocabulary

log = logging.getLogger(__name__)


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
    #: each record's neighbour records by source, from the same pass (when asked for)
    neighbours: list[Neighbours] | None = None
    #: the ranker's out-of-fold scores of the candidates (`HybridTrainer.out_of_fold`),
    #: once made
    oof: np.ndarray | None = field(default=None, repr=False)


def feature_table(pipe: HybridPipeline, records: Sequence[Record], batch_size: int = 512,
                  neighbours: bool = False, progress: ProgressCallback | None = None,
                  phase: str = "split B's candidates") -> FeatureTable:
    """Every candidate of ``records`` with features and gold; ``neighbours``: also each
    record's neighbour records of the same searches (`Source.record_neighbours`);
    ``progress``: the records done, a batch at a time, as ``phase``."""
    parts = []
    names: list[str] = []
    found: list[Neighbours] = []
    if progress is not None:
        progress(phase, 0, len(records))
    for start in range(0, len(records), batch_size):
        chunk = records[start:start + batch_size]
        batch = pipe.prepare(chunk)
        rows, cols, X, names, support = pipe.features(batch)
        gold = label_matrix(chunk, pipe.vocab)
        parts.append((rows + start, cols, X, np.asarray(gold[rows, cols]).ravel(), support))
        if neighbours:
            found.extend(pipe.record_neighbours(batch))
        if progress is not None:
            progress(phase, start + len(chunk), len(records))
    if not parts:
        raise ValueError("no records to build features from")
    rows, cols, X, y, support = (np.concatenate([p[i] for p in parts]) for i in range(5))
    return FeatureTable(rows, cols, X, y, names, support, found if neighbours else None)


def in_holdout(record_id: str, fraction: float, seed: int) -> bool:
    """Stable split by a hash of the id, so reruns and resumes pick the same records."""
    return zlib.crc32(f"{seed}:{record_id}".encode()) % 10_000 < fraction * 10_000


def subject_prior(Y: sp.csr_matrix) -> np.ndarray:
    """log relative frequency of each subject among training records (feature ``prior``)."""
    counts = np.asarray(Y.sum(axis=0)).ravel()
    return np.log((counts + 1.0) / (Y.shape[0] + 1.0)).astype(np.float32)


class HybridTrainer:
    """Fits a `HybridPipeline` from training records by the recipe's ``config``, by
    stacking (the module); ``threads``: what training's libraries may use (0: their
    defaults). Not the domain models' `tagalign.classify.stacker.DomainStacker`.

    ``progress`` hears the long steps by phase (a `ProgressCallback`; by default logged
    with the time left, `ProgressLog`): ``split B's candidates`` (a batch of records at a
    time), ``ranker`` and ``quality fold k/n`` (boosting rounds), ``quality recall`` and
    ``quality precision`` (the estimate's rounds), and the sources' own (`FitContext`:
    ``lexical: labels``, ``lexical: label counts``, ``omikuji: languages``)."""

    def __init__(self, vocab: Vocabulary, config: HybridConfig, threads: int = 0,
                 progress: ProgressCallback | None = None):
        self.vocab, self.config, self.threads = vocab, config, threads
        self.progress: ProgressCallback = progress or ProgressLog(log)
        self.source_names = config.source_names
        #: B's held-out evidence of the last `fit` (``held_out_evidence``; None: not kept)
        self.held_out_: HeldOutEvidence | None = None

    def fit(self, records: Sequence[Record], runner: PhaseRunner) -> HybridPipeline:
        p = self.config
        stage = self.stack(records, runner)
        pipe = stage.pipeline
        tables: list[FeatureTable] = []  # split B's table, built once when a phase needs it

        def table() -> FeatureTable:
            if not tables:
                tables.append(feature_table(pipe, stage.ranker_records,
                                            neighbours=p.held_out_evidence,
                                            progress=self.progress))
            return tables[0]

        pipe.ranker = runner.run("ranker", lambda: self.fit_ranker(
                                     self.with_tail(stage, table())),
                                 lambda r, d: r.save(d), FusionRanker.load)
        if p.quality:  # before B joins the memory: B's features stay held-out
            pipe.quality = runner.run(
                "quality", lambda: self.fit_quality(table(), stage.ranker_records),
                lambda q, d: q.save(d), QualityEstimator.load)
            runner.log("quality feature importance (gain, recall): " + ", ".join(
                f"{k}={v:.3f}" for k, v in sorted(pipe.quality.importance().items(),
                                                  key=lambda kv: -kv[1])[:8]))
        self.held_out_ = None
        if p.held_out_evidence:  # before B joins the memory: A's neighbours only
            self.held_out_ = runner.run(  # None only from load: a folder without evidence
                "held-out evidence", lambda: self.held_out(pipe, table(), stage.ranker_records),
                lambda h, d: None if h is None else h.save(d), HeldOutEvidence.load)
        runner.log("ranker feature importance (gain): " + ", ".join(
            f"{k}={v:.3f}" for k, v in sorted(pipe.ranker.importance().items(),
                                              key=lambda kv: -kv[1])[:12]))
        runner.step("add held-out records to memory",
                    lambda: pipe.learn(stage.ranker_records, p.batch_size))
        tables.clear()  # split B's candidate table: the refit below peaks without it
        if "omikuji" in p.sources and self.refits(len(stage.records)
                                                     - len(stage.ranker_records), runner):
            self.refit_omikuji(pipe, runner, stage)
        pipe.prior = subject_prior(pipe.memory.Y)
        if pipe.co is not None:  # suggesting: co-assignments of all training records
            pipe.co = CoAssignment.from_labels(pipe.memory.Y, p.agreement_top_m)
        pipe.prior_weight, pipe.support_weight = p.prior_weight, p.support_weight
        pipe.unseen_weight = p.unseen_weight
        return pipe

    def stack(self, records: Sequence[Record], runner: PhaseRunner) -> Stage:
        """Split train into A/B and fit every source on A (the first half of stacking)."""
        p = self.config
        analyzer = Analyzer()
        records = [r for r in records if r.subjects]
        langs = record_languages(records)
        hold = np.array([in_holdout(r.id, p.holdout_fraction, p.seed) for r in records])
        idx_b = np.flatnonzero(hold)[: p.max_ranker_records]
        idx_a = np.setdiff1d(np.arange(len(records)), idx_b)
        if len(idx_b) < 20 or len(idx_a) < 20:
            raise ValueError(f"hybrid needs more training records (got {len(records)})")
        runner.log(f"{len(idx_a)} records train the sources, {len(idx_b)} the ranker")
        tokens = runner.step("tokenise", lambda: [
            analyzer.tokens(r.text, lg) for r, lg in zip(records, langs, strict=True)])
        rec_a = [records[i] for i in idx_a]
        featurizer = runner.run(
            "tfidf", lambda: TfidfFeaturizer().fit([tokens[i] for i in idx_a],
                                                   [langs[i] for i in idx_a]),
            lambda f, d: f.save(d), TfidfFeaturizer.load)
        encoder = None
        if p.uses_embeddings:
            from tagalign.train.static_model import train_static_encoder

            encoder = runner.run(
                "encoder", lambda: train_static_encoder(rec_a, self.vocab, p.encoder,
                                                        threads=self.threads),
                lambda e, d: e.save(d), StaticEmbeddingEncoder.load)
        memory = RecordMemory.from_records(rec_a, self.vocab, [langs[i] for i in idx_a])
        ctx = FitContext(
            self.vocab, analyzer, memory,
            featurizer.transform([tokens[i] for i in idx_a], [langs[i] for i in idx_a]),
            Y=label_matrix(rec_a, self.vocab), encoder=encoder, records=rec_a,
            tokens=[tokens[i] for i in idx_a], threads=self.threads, progress=self.progress)
        # the records' embeddings only for a source still to fit on them (resuming after
        # the sources, a 1M training skipped 258 s of embedding)
        on_embeddings = [k for k, name in enumerate(self.source_names)
                         if SOURCES.lookup(name).fits_on_embeddings]
        if encoder is not None and not all(runner.finished(f"source-{self.source_names[k]}")
                                           for k in on_embeddings):
            ctx.embeddings = runner.step("embed records", lambda: encoder.encode(
                RecordTexts(rec_a), show_progress=True))
        sources = []
        for k, name in enumerate(self.source_names):
            src = p.new_source(name)
            sources.append(runner.run(
                f"source-{name}", partial(_fitted, src, ctx), lambda s, d: s.save(d),
                partial(_loaded, src, ctx)))
            if k >= max(on_embeddings, default=-1):  # no source left to fit on them:
                ctx.embeddings = None  # their index holds its own copy (1.5 GB at 1M)
        pipe = HybridPipeline(self.vocab, analyzer, featurizer, memory, sources, encoder,
                              prior=subject_prior(ctx.Y))
        if p.agreement:  # from split A only: the ranker's records are not in it
            pipe.co = CoAssignment.from_labels(ctx.Y, p.agreement_top_m)
        return Stage(pipe, [records[i] for i in idx_b], records, tokens, langs)

    def refits(self, n_split_a: int, runner: PhaseRunner) -> bool:
        """Whether Omikuji's trees are refit on all records (``refit_full``; "auto": unless
        split A's ``n_split_a`` records already fill the trees' ``max_records``)."""
        how, cap = self.config.refit_full, self.config.omikuji.max_records
        if how != "auto":
            return bool(how)
        if cap is not None and n_split_a >= cap:
            runner.log(f"Omikuji: split A's trees serve, no refit (refit_full=auto: split A's "
                       f"{n_split_a} records already fill omikuji_max_records={cap})")
            return False
        return True

    def refit_omikuji(self, pipe: HybridPipeline, runner: PhaseRunner, stage: Stage) -> None:
        ctx = FitContext(self.vocab, pipe.analyzer, pipe.memory,
                         pipe.featurizer.transform(stage.tokens, stage.languages),
                         label_matrix(stage.records, self.vocab), threads=self.threads,
                         progress=self.progress)
        # the split-A trees go first: the refit peaks (about 0.5 GB of trees in full
        # training) without them (issue 18: training peak RSS)
        at = [s.name for s in pipe.sources].index("omikuji")
        pipe.sources = [s for s in pipe.sources if s.name != "omikuji"]
        gc.collect()
        src = self.config.new_source("omikuji")
        src = runner.run("source-omikuji-full", lambda: (src.fit(ctx), src)[1],
                         lambda s, d: s.save(d), lambda d: (src.load_state(d, ctx), src)[1])
        pipe.sources.insert(at, src)

    def with_tail(self, stage: Stage, table: FeatureTable) -> FeatureTable:
        """Split B's ``table`` and, with ``tail_simulation`` > 0, that share of its records
        (by a seeded hash of the id) again, blinded (`HybridPipeline.blinded`): as if no
        split-A record carried the subjects at most ``tail_max_count`` of them carry, so
        their gold pairs look as a new heading's do (issue 66)."""
        cfg = self.config.ranker
        if not cfg.tail_simulation:
            return table
        counts = np.asarray(stage.pipeline.memory.Y.sum(axis=0)).ravel()
        withheld = (counts >= 1) & (counts <= cfg.tail_max_count)
        chosen = [r for r in stage.ranker_records
                  if in_holdout(r.id, cfg.tail_simulation, self.config.seed + 1)]
        if not chosen or not withheld.any():
            return table
        log.info("tail simulated: %d of split B's records again, %d subjects withheld",
                 len(chosen), int(withheld.sum()))
        blind = feature_table(stage.pipeline.blinded(withheld), chosen,
                              progress=self.progress, phase="split B's simulated tail")
        if blind.names != table.names:
            raise ValueError(f"blinded features {blind.names} differ from {table.names}")
        offset = len(stage.ranker_records)
        return FeatureTable(np.concatenate([table.rows, blind.rows + offset]),
                            np.concatenate([table.cols, blind.cols]),
                            np.concatenate([table.X, blind.X]),
                            np.concatenate([table.y, blind.y]), table.names,
                            np.concatenate([table.support, blind.support]))

    def fit_ranker(self, table: FeatureTable, keep: np.ndarray | None = None,
                   phase: str = "ranker") -> FusionRanker:
        """The ranker on the table's candidates (those of ``keep`` only, when given), its
        rounds reported as ``phase``."""
        sel = slice(None) if keep is None else keep
        return FusionRanker(self.config.ranker, num_threads=self.threads).fit(
            table.X[sel], table.y[sel], table.rows[sel], table.names,
            progress=self.progress, phase=phase)

    def fit_quality(self, table: FeatureTable, records: Sequence[Record]) -> QualityEstimator:
        """Cross-fitted: out-of-fold ranker scores on B, then the estimator on all of B."""
        raw = self.out_of_fold(table)
        n_gold = np.asarray(label_matrix(records, self.vocab).sum(axis=1)).ravel()
        data = QualityData.build(table.rows, raw, table.X, table.names, table.support,
                                 table.y, n_gold)
        # the scores it learns from are those served: `blend` with the recipe's weights
        return QualityEstimator(self.config.estimator, num_threads=self.threads).fit_data(
            data, self.config.blend_weights, self.progress)

    def out_of_fold(self, table: FeatureTable) -> np.ndarray:
        """The candidates' ranker scores, each from a ranker fitted on the other
        ``quality_folds`` folds of B's records (made once per table: the quality estimate
        and the held-out evidence read the same)."""
        if table.oof is None:
            folds = self.config.estimator.folds

            def fit_predict(train: np.ndarray, test: np.ndarray, k: int) -> np.ndarray:
                return self.fit_ranker(table, train, f"quality fold {k + 1}/{folds}"
                                       ).predict(table.X[test])

            table.oof = cross_fitted_scores(table.rows, folds,
                                            self.config.estimator.seed, fit_predict)
        return table.oof

    def held_out(self, pipe: HybridPipeline, table: FeatureTable, records: Sequence[Record]
                 ) -> HeldOutEvidence:
        """B's records: their out-of-fold lists (blended as served), ``held_out_depth``
        deep, and the neighbour records A's memory gave them (`tagalign.suggest.held_out`)."""
        p = self.config
        if table.neighbours is None:
            raise ValueError("held-out evidence needs the table's neighbour records")
        prior = table.X[:, table.names.index("prior")]
        scores = blend(self.out_of_fold(table), prior, table.support.sum(1),
                       *p.blend_weights, unseen_prior=pipe.unseen_prior)
        top = top_k(table.rows, table.cols, scores, len(records), p.held_out_depth)
        subjects = pipe.vocab.subjects
        return HeldOutEvidence(
            [r.id for r in records],
            [[(subjects[c].id, float(sc)) for c, sc, _ in row] for row in top],
            table.neighbours, int(p.held_out_depth),
            {"split": "B", "holdout_fraction": p.holdout_fraction, "seed": p.seed,
             "ranker_folds": p.estimator.folds,
             "memory_records": len(pipe.memory.ids)})


def _fitted(src: Source, ctx: FitContext) -> Source:
    src.fit(ctx)
    return src


def _loaded(src: Source, ctx: FitContext, folder: Path) -> Source:
    src.load_state(folder, ctx)
    return src
