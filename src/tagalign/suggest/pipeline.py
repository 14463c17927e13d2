"""`HybridPipeline`: records → shared batch → sources' candidates → fused, ranked subjects."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tagalign.records import Record
from tagalign.runtime import threads
from tagalign.suggest.fusion import FusionRanker, blend, merge, top_k
from tagalign.suggest.quality import CandidateProfile, QualityEstimator
from tagalign.suggest.sources.base import Batch, Candidates, Source
from tagalign.suggest.sources.memory import RecordMemory
from tagalign.suggest.suggestion import Quality, Suggestion, keep_above
from tagalign.text import Analyzer, guess_language
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.vocab import Vocabulary

TYPES = ["Book", "Thesis", "Conference", "Report", "Article"]
EXTRA_FEATURES = ["prior", "is_en", "rec_type", "n_tokens", "n_sources"]
#: batches up to this size run the encoder beside the TF-IDF work and the sources side by
#: side on threads (`_pool`); larger batches keep one thread of control and let each
#: library use its own threads on the whole batch
SMALL_BATCH = 8
_POOL: ThreadPoolExecutor | None = None
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

    def prepare(self, records: Sequence[Record]) -> Batch:
        langs = [r.language if r.language in ("de", "en") else guess_language(r.text)
                 for r in records]
        tokens = [self.analyzer.tokens(r.text, lg) for r, lg in zip(records, langs, strict=True)]
        titles = [self.analyzer.tokens(r.title, lg) for r, lg in zip(records, langs,
                                                                      strict=True)]
        batch = Batch(records, langs, tokens, titles)
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
        return rows, cols, X, names + EXTRA_FEATURES, support

    def score(self, cols: np.ndarray, X: np.ndarray, support: np.ndarray,
              prior_weight: float | None = None, support_weight: float | None = None
              ) -> np.ndarray:
        """The ranker's probabilities, corrected by `blend` (weights: the pipeline's unless
        given, as tuning trials do)."""
        prior = self.prior[cols] if len(self.prior) else np.zeros(len(cols), np.float32)
        return blend(self.ranker.predict(X), prior, support.sum(1),
                     self.prior_weight if prior_weight is None else prior_weight,
                     self.support_weight if support_weight is None else support_weight)

    def rank(self, batch: Batch, limit: int, threshold: float | None = None
             ) -> tuple[list[list[tuple[int, float, list[str]]]], list[Quality | None]]:
        """Top ``limit`` (subject position, score, supporting sources) per record, and its
        quality estimate for that list after ``threshold`` (None: no estimate wanted)."""
        rows, cols, X, feat_names, support = self.features(batch)
        names = [s.name for s in self.sources]
        scores = self.score(cols, X, support)
        ranked = top_k(rows, cols, scores, len(batch), limit)
        qualities: list[Quality | None] = [None] * len(batch)
        if threshold is not None and self.quality is not None:
            profile = CandidateProfile.build(rows, scores, X, feat_names, support, len(batch))
            qualities = list(self.quality.predict(profile, limit, threshold))
        return [[(c, s, [n for n, on in zip(names, support[i], strict=True) if on])
                 for c, s, i in row] for row in ranked], qualities

    def suggest(self, records: Sequence[Record], limit: int = 20) -> list[list[Suggestion]]:
        batch = self.prepare(records)
        ranked, _ = self.rank(batch, limit)
        return [self._suggestions(batch, i, row) for i, row in enumerate(ranked)]

    def suggest_with_quality(self, records: Sequence[Record], limit: int = 20,
                             threshold: float = 0.0
                             ) -> list[tuple[list[Suggestion], Quality | None]]:
        """Suggestions scoring ≥ ``threshold`` and the estimated quality of that list."""
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
