"""`HybridPipeline`: records → shared batch → sources' candidates → fused, ranked subjects."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from tagalign.records import Record
from tagalign.runtime import in_part, single_threaded_part, threads
from tagalign.suggest.agreement import AGREEMENT_FEATURES, CoAssignment, rrf
from tagalign.suggest.fusion import FusionRanker, blend, merge, top_k
from tagalign.suggest.quality import CandidateProfile, QualityEstimator
from tagalign.suggest.sources.base import Batch, Candidates, Source
from tagalign.suggest.sources.memory import RecordMemory
from tagalign.suggest.suggestion import Quality, Suggestion, keep_above
from tagalign.text import Analyzer
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.vocab import Vocabulary

T = TypeVar("T")
TYPES = ["Book", "Thesis", "Conference", "Report", "Article"]
EXTRA_FEATURES = ["prior", "is_en", "rec_type", "n_tokens", "n_sources"]
#: batches up to this size run the encoder beside the TF-IDF work and the sources side by
#: side on threads (`_pool`); larger batches keep one thread of control and let each
#: library use its own threads on the whole batch
SMALL_BATCH = 8
#: batches of at least twice this many records are split into parts that run side by side,
#: one per thread the process may use (`_parts_pool`; issue 18: batch speed on 2 cores)
MIN_PART = 64
_POOL: ThreadPoolExecutor | None = None
_PARTS: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor | None:
    """The threads a small batch's independent steps share, or None when one thread is all
    the process may use (`tagalign.runtime.threads`). Worth it because those steps spend
    their time in code that releases the GIL (the tokenizer, torch, faiss, Omikuji,
    LightGBM): a single record's encoder and neighbour searches then overlap the TF-IDF
    sources instead of waiting for them (issue 23: single-record latency)."""
    global _POOL
    if threads(default=2) < 2:
        return None
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tagalign-suggest")
    return _POOL


def _parts_pool(n_records: int) -> tuple[ThreadPoolExecutor | None, int]:
    """The pool that runs a large batch's parts, and how many parts (1: no split).

    A batch's work is mostly in code that releases the GIL (Omikuji, the TF-IDF product and
    the neighbour top-k, faiss, LightGBM), but much of it runs on one thread (scipy's
    product, NumPy) and the rest starts its own thread team per call. Splitting the batch
    into parts, one per core, each calling its libraries with one thread
    (`tagalign.runtime.single_threaded_part`), keeps both cores busy throughout. Nested
    calls (a part's own sources) never split again."""
    global _PARTS
    n = min(threads(default=os.cpu_count() or 1), n_records // MIN_PART)
    if n < 2 or in_part():
        return None, 1
    with _POOL_LOCK:
        if _PARTS is None or _PARTS._max_workers < n:  # noqa: SLF001 - grow on demand
            _PARTS = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tagalign-part",
                                        initializer=single_threaded_part)
    return _PARTS, n


def _in_parts(records: Sequence[Record], run: Callable[[Sequence[Record]], list[T]]
              ) -> list[T] | None:
    """``run`` over ``records`` split into parts on `_parts_pool`'s threads, results in
    order; None when the batch is not split (``run`` is then the caller's to do)."""
    pool, n = _parts_pool(len(records))
    if pool is None:
        return None
    bounds = np.linspace(0, len(records), n + 1).astype(int)
    parts = [records[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return [row for part in pool.map(run, parts) for row in part]


@dataclass
class HybridPipeline:
    vocab: Vocabulary
    analyzer: Analyzer
    featurizer: TfidfFeaturizer
    memory: RecordMemory
    sources: list[Source]
    encoder: Any = None  # tagalign.encode.static.StaticEmbeddingEncoder or None
    ranker: FusionRanker | None = None
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    #: per-record quality estimator (None: a model trained before it existed, or off)
    quality: QualityEstimator | None = None
    #: suggest-time score corrections (`tagalign.suggest.fusion.blend`); 0: the ranker's own
    prior_weight: float = 0.0
    support_weight: float = 0.0
    #: co-assignment of subjects in training (None: no agreement features, as models
    #: saved before issue 18) and how many of a record's candidates are its anchors
    co: CoAssignment | None = None
    co_top_m: int = 10

    def prepare(self, records: Sequence[Record]) -> Batch:
        batch = Batch.tokenised(records, self.analyzer)
        tokens, langs = batch.tokens, batch.languages
        pool = _pool() if len(records) <= SMALL_BATCH else None
        encoded: Future | None = None
        if self.encoder is not None and pool is not None:
            encoded = pool.submit(self.encoder.encode, [r.text for r in records])
        batch.tfidf = self.featurizer.transform(tokens, langs)
        if encoded is not None:
            batch.embeddings = encoded.result()
        elif self.encoder is not None:
            batch.embeddings = self.encoder.encode([r.text for r in records])
        return batch

    def candidates(self, batch: Batch) -> list[Candidates]:
        """Each source's candidates, in the order of ``sources`` (a small batch's on
        threads: the sources only read the batch, each writes its own evidence key)."""
        pool = _pool() if len(batch) <= SMALL_BATCH and len(self.sources) > 1 else None
        if pool is None:
            return [s.candidates(batch) for s in self.sources]
        # the first source runs here, the others on the pool's threads
        futures = [pool.submit(s.candidates, batch) for s in self.sources[1:]]
        first = self.sources[0].candidates(batch)
        return [first, *(f.result() for f in futures)]

    def features(self, batch: Batch, cands: list[Candidates] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray]:
        """All candidates of a batch: (rows, subject positions, features, names, support).

        ``support[i, j]`` says whether source ``j`` proposed candidate ``i``; ``cands``:
        the sources' candidates when already computed (`candidates`).
        """
        cands = self.candidates(batch) if cands is None else cands
        rows, cols, X, names = merge(cands, len(self.vocab))
        firsts = np.cumsum([0] + [len(c.names) for c in cands[:-1]])
        support = ~np.isnan(X[:, firsts])  # which sources proposed each candidate
        n_sources = support.sum(1)
        is_en = np.array([lg == "en" for lg in batch.languages], np.float32)
        rtype = np.array([TYPES.index(r.type) if r.type in TYPES else -1
                          for r in batch.records], np.float32)
        ntok = np.array([len(t) for t in batch.tokens], np.float32)
        prior = self.prior[cols] if len(self.prior) else np.zeros(len(cols), np.float32)
        extra = np.column_stack([prior, is_en[rows], rtype[rows], ntok[rows], n_sources])
        X = np.hstack([X, extra.astype(np.float32)])
        names = names + EXTRA_FEATURES
        if self.co is not None:
            agree = self.co.features(rows, cols, rrf(X, names), len(batch), self.co_top_m)
            X = np.hstack([X, agree])
            names = names + AGREEMENT_FEATURES
        return rows, cols, X, names, support

    def score(self, cols: np.ndarray, X: np.ndarray, support: np.ndarray,
              prior_weight: float | None = None, support_weight: float | None = None,
              names: list[str] | None = None) -> np.ndarray:
        """The ranker's probabilities, corrected by `blend` (weights: the pipeline's unless
        given, as tuning trials do); ``names``: X's columns (`FusionRanker.columns`)."""
        prior = self.prior[cols] if len(self.prior) else np.zeros(len(cols), np.float32)
        return blend(self.ranker.predict(X, names), prior, support.sum(1),
                     self.prior_weight if prior_weight is None else prior_weight,
                     self.support_weight if support_weight is None else support_weight)

    def rank(self, batch: Batch, limit: int, threshold: float | None = None
             ) -> tuple[list[list[tuple[int, float, list[str]]]], list[Quality | None]]:
        """Top ``limit`` (subject position, score, supporting sources) per record, and its
        quality estimate for that list after ``threshold`` (None: no estimate wanted)."""
        rows, cols, X, feat_names, support = self.features(batch)
        names = [s.name for s in self.sources]
        scores = self.score(cols, X, support, names=feat_names)
        ranked = top_k(rows, cols, scores, len(batch), limit)
        qualities: list[Quality | None] = [None] * len(batch)
        if threshold is not None and self.quality is not None:
            profile = CandidateProfile.build(rows, scores, X, feat_names, support, len(batch))
            qualities = list(self.quality.predict(profile, limit, threshold))
        return [[(c, s, [n for n, on in zip(names, support[i], strict=True) if on])
                 for c, s, i in row] for row in ranked], qualities

    def suggest(self, records: Sequence[Record], limit: int = 20) -> list[list[Suggestion]]:
        parted = _in_parts(records, lambda p: self.suggest(p, limit))
        if parted is not None:
            return parted
        batch = self.prepare(records)
        ranked, _ = self.rank(batch, limit)
        return [self._suggestions(batch, i, row) for i, row in enumerate(ranked)]

    def suggest_with_quality(self, records: Sequence[Record], limit: int = 20,
                             threshold: float = 0.0
                             ) -> list[tuple[list[Suggestion], Quality | None]]:
        """Suggestions scoring ≥ ``threshold`` and the estimated quality of that list."""
        parted = _in_parts(records, lambda p: self.suggest_with_quality(p, limit, threshold))
        if parted is not None:
            return parted
        batch = self.prepare(records)
        ranked, qualities = self.rank(batch, limit, threshold)
        return [(keep_above(self._suggestions(batch, i, row), threshold), q)
                for i, (row, q) in enumerate(zip(ranked, qualities, strict=True))]

    # -- reasons ---------------------------------------------------------------------------
    def _voters(self, batch: Batch, source_name: str, r: int) -> dict[int, list[int]]:
        """Subject position → memory rows of record ``r``'s neighbours that have it."""
        nbrs = batch.evidence.get(source_name)
        out: dict[int, list[int]] = {}
        if nbrs is None:
            return out
        Y = self.memory.Y
        for n in nbrs[r]:
            if n >= 0:
                for pos in Y.indices[Y.indptr[n]:Y.indptr[n + 1]].tolist():
                    out.setdefault(pos, []).append(int(n))
        return out

    def _suggestions(self, batch: Batch, r: int, row: list[tuple[int, float, list[str]]]
                     ) -> list[Suggestion]:
        lang = batch.languages[r]
        matches = batch.evidence["lexical"][r] if "lexical" in batch.evidence else {}
        voters = [self._voters(batch, name, r) for name in ("tfidf_knn", "emb_knn")]
        out = []
        for pos, score, sources in row:
            subj = self.vocab.subjects[pos]
            reasons: dict[str, Any] = {"sources": sources}
            rows = list(dict.fromkeys(n for v in voters for n in v.get(pos, ())))[:3]
            if rows:
                reasons["neighbours"] = [{"id": self.memory.ids[n], "title": self.memory.titles[n]}
                                         for n in rows]
            if pos in matches:
                reasons["label_match"] = subj.label(lang)
            out.append(Suggestion(subj.id, float(score), subj.label(lang), reasons))
        return out
