"""`HybridPipeline`: records → shared batch → sources' candidates → fused, ranked subjects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tagalign.records import Record
from tagalign.suggest.fusion import FusionRanker, merge, top_k
from tagalign.suggest.quality import CandidateProfile, QualityEstimator
from tagalign.suggest.sources.base import Batch, Source
from tagalign.suggest.sources.memory import RecordMemory
from tagalign.suggest.suggestion import Quality, Suggestion, keep_above
from tagalign.text import Analyzer, guess_language
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.vocab import Vocabulary

TYPES = ["Book", "Thesis", "Conference", "Report", "Article"]
EXTRA_FEATURES = ["prior", "is_en", "rec_type", "n_tokens", "n_sources"]


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

    def prepare(self, records: Sequence[Record]) -> Batch:
        langs = [r.language if r.language in ("de", "en") else guess_language(r.text)
                 for r in records]
        tokens = [self.analyzer.tokens(r.text, lg) for r, lg in zip(records, langs, strict=True)]
        titles = [self.analyzer.tokens(r.title, lg) for r, lg in zip(records, langs,
                                                                      strict=True)]
        batch = Batch(records, langs, tokens, titles)
        batch.tfidf = self.featurizer.transform(tokens, langs)
        if self.encoder is not None:
            batch.embeddings = self.encoder.encode([r.text for r in records])
        return batch

    def features(self, batch: Batch
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray]:
        """All candidates of a batch: (rows, subject positions, features, names, support).

        ``support[i, j]`` says whether source ``j`` proposed candidate ``i``.
        """
        cands = [s.candidates(batch) for s in self.sources]
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

    def rank(self, batch: Batch, limit: int, threshold: float | None = None
             ) -> tuple[list[list[tuple[int, float, list[str]]]], list[Quality | None]]:
        """Top ``limit`` (subject position, score, supporting sources) per record, and its
        quality estimate for that list after ``threshold`` (None: no estimate wanted)."""
        rows, cols, X, feat_names, support = self.features(batch)
        names = [s.name for s in self.sources]
        scores = self.ranker.predict(X)
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
