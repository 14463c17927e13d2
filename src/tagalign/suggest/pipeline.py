"""`HybridPipeline`: records → shared batch → sources' candidates → fused, ranked subjects."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.errors import ModelFormatError, trained
from tagalign.io import load_npy, read_json, save_npy_atomic, write_json_atomic
from tagalign.records import Record
from tagalign.runtime import Runtime
from tagalign.suggest.agreement import AGREEMENT_FEATURES, CoAssignment, rrf
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.fusion import FusionRanker, Weights, blend, merge, top_k
from tagalign.suggest.quality import CandidateProfile, QualityEstimator
from tagalign.suggest.request import SuggestRequest
from tagalign.suggest.sources.base import (
    MAX_REASON_ITEMS,
    Batch,
    Candidates,
    Encoder,
    FitContext,
    NewHeadings,
    Source,
)
from tagalign.suggest.sources.memory import RecordMemory, label_matrix
from tagalign.suggest.suggestion import Neighbours, Quality, Suggestion, Tagged, keep_above
from tagalign.text import Analyzer
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.vocab import Vocabulary

T = TypeVar("T")
TYPES = ["Book", "Thesis", "Conference", "Report", "Article"]
EXTRA_FEATURES = ["prior", "is_en", "rec_type", "n_tokens", "n_sources"]
#: whether the subject has a label in the record's language (every GND heading a German
#: one; 78,394 of 204,569 an English one): an English record's match with a heading known
#: by its German label alone is weaker evidence (issue 66)
LANGUAGE_FEATURES = ["has_lang_label"]
#: batches up to this size run the encoder beside the TF-IDF work and the sources side by
#: side on the runtime's pool; larger batches keep one thread of control and let each
#: library use the batch's threads on the whole batch
SMALL_BATCH = 8
#: batches of at least twice this many records are split into parts that run side by side,
#: one per thread of the runtime, each calling its libraries with one thread (issue 18:
#: batch speed on 2 cores): a batch's work is mostly in code that releases the GIL
#: (Omikuji, the TF-IDF product and top-k, faiss, LightGBM), but much of it runs on one
#: thread (scipy's product, NumPy) and the rest starts its own thread team per call
MIN_PART = 64
#: what `HybridPipeline.rank` asks (its limit given apart)
PLAIN = SuggestRequest.ranking(0)


@dataclass
class Ranked:
    """A batch's candidates, features and final scores (`HybridPipeline.ranked`), and each
    record's top ``limit`` as (subject position, score, candidate index), best first."""

    rows: np.ndarray
    cols: np.ndarray
    X: np.ndarray
    names: list[str]
    support: np.ndarray
    scores: np.ndarray
    top: list[list[tuple[int, float, int]]]


@dataclass
class HybridPipeline:
    """Records → shared batch → each source's candidates → features → the ranker's scores
    (corrected by `blend`) → each record's top subjects with reasons and a quality estimate.

    The pipeline owns its parts and saves them, each into its own folder (`save`/`load`,
    as sentence-transformers' modules); the `runtime` says how many threads a batch uses."""

    vocab: Vocabulary
    analyzer: Analyzer
    featurizer: TfidfFeaturizer
    memory: RecordMemory
    sources: list[Source]
    encoder: Encoder | None = None
    ranker: FusionRanker | None = None
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    #: per-record quality estimator (None: ``quality=false``)
    quality: QualityEstimator | None = None
    #: suggest-time score corrections (`tagalign.suggest.fusion.blend`); 0: the ranker's own
    prior_weight: float = 0.0
    support_weight: float = 0.0
    unseen_weight: float = 0.0
    #: co-assignment of subjects in training (None: ``agreement=false``)
    co: CoAssignment | None = None
    runtime: Runtime = field(default_factory=Runtime)
    #: `_has_english`, made on first use
    has_english_: np.ndarray | None = field(default=None, init=False, repr=False)

    def prepare(self, records: Sequence[Record], threads: int | None = None) -> Batch:
        """The records' shared batch (tokens, TF-IDF rows, embeddings); ``threads``: what
        the batch may use (default: the runtime's)."""
        threads = self.runtime.n_threads if threads is None else threads
        pool = self.runtime.pool() if threads > 1 else None
        batch = Batch.tokenised(records, self.analyzer, threads, pool)
        small = pool if len(records) <= SMALL_BATCH else None
        encoded: Future | None = None
        if self.encoder is not None and small is not None:
            encoded = small.submit(self.encoder.encode, [r.text for r in records])
        batch.tfidf = self.featurizer.transform(batch.tokens, batch.languages)
        if encoded is not None:
            batch.embeddings = encoded.result()
        elif self.encoder is not None:
            batch.embeddings = self.encoder.encode([r.text for r in records])
        if self.encoder is not None and any(s.embeds_titles for s in self.sources):
            batch.title_embeddings = self.encoder.encode([r.title for r in records])
        return batch

    def candidates(self, batch: Batch) -> list[Candidates]:
        """Each source's candidates, in the order of ``sources`` (a small batch's on the
        pool's threads: the sources only read the batch, each writes its own evidence key;
        worth it because they spend their time in code that releases the GIL, issue 23)."""
        pool = batch.pool if len(batch) <= SMALL_BATCH and len(self.sources) > 1 else None
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
        successor = self.vocab.successors()
        if successor is not None:  # retired headings: their evidence to their targets
            cands = [c.followed(successor) for c in cands]
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
        proxy = rrf(X, names)
        if self.co is not None:
            agree = self.co.features(rows, cols, proxy, len(batch))
            X = np.hstack([X, agree])
            names = names + AGREEMENT_FEATURES
        in_lang = np.where(is_en[rows] > 0, self._has_english()[cols], True).astype(np.float32)
        paired = [src.score_pairs(batch, rows, cols, proxy) for src in self.sources
                  if src.pair_features]
        X = np.hstack([X, in_lang[:, None], *paired])
        names = names + LANGUAGE_FEATURES + [n for src in self.sources
                                             for n in src.pair_features]
        return rows, cols, X, names, support

    def _has_english(self) -> np.ndarray:
        """Per subject position, whether the vocabulary gives it an English label (made
        once per vocabulary: an update replaces it, `take_vocabulary`)."""
        if self.has_english_ is None:
            self.has_english_ = np.array(["en" in s.labels for s in self.vocab.subjects], bool)
        return self.has_english_

    @property
    def unseen_prior(self) -> float | None:
        """The prior of a subject no training record carries: the lowest (`subject_prior`
        gives each such subject the same); None without priors."""
        return float(self.prior.min()) if len(self.prior) else None

    @property
    def weights(self) -> Weights:
        """The served `blend` weights: (prior, support, unseen)."""
        return self.prior_weight, self.support_weight, self.unseen_weight

    def ranked(self, batch: Batch, limit: int, cands: list[Candidates] | None = None,
               weights: Weights | None = None) -> Ranked:
        """The one scoring function (suggesting, tuning trials, quality): features, the
        ranker's probabilities corrected by `blend` (``weights``: the pipeline's unless
        given, as tuning trials do), each record's top ``limit``."""
        rows, cols, X, names, support = self.features(batch, cands)
        # the candidates' priors are the feature `features` already gathered (and the one
        # `QualityData` reads, so the estimator's scores are these)
        ranker = trained(self.ranker, "the hybrid pipeline")
        scores = blend(ranker.predict(X, names, batch.threads), X[:, names.index("prior")],
                       support.sum(1), *(self.weights if weights is None else weights),
                       unseen_prior=self.unseen_prior)
        return Ranked(rows, cols, X, names, support, scores,
                      top_k(rows, cols, scores, len(batch), limit))

    def _rank(self, batch: Batch, limit: int, threshold: float | None, depth: int
              ) -> tuple[list[list[tuple[int, float, list[str]]]], list[Quality | None]]:
        """Top ``max(limit, depth)`` (subject position, score, supporting sources) per
        record, and its quality estimate for the top ``limit`` after ``threshold`` (None: no
        estimate wanted). The estimator reads the same (blended) scores the list is cut by."""
        r = self.ranked(batch, max(limit, depth))
        names = [s.name for s in self.sources]
        qualities: list[Quality | None] = [None] * len(batch)
        estimator = self.quality_in_force()
        if threshold is not None and estimator is not None:
            profile = CandidateProfile.build(r.rows, r.scores, r.X, r.names, r.support,
                                             len(batch))
            qualities = list(estimator.predict(profile, limit, threshold, batch.threads))
        return [[(c, s, [n for n, on in zip(names, r.support[i], strict=True) if on])
                 for c, s, i in row] for row in r.top], qualities

    def quality_in_force(self) -> QualityEstimator | None:
        """The estimator, when it learned the scores served now (the same `blend` weights);
        None otherwise: its estimates would describe other lists (issue 30)."""
        q = self.quality
        if q is None or q.weights_ != self.weights:
            return None
        return q

    def retune_quality(self) -> bool:
        """Learn the estimator again for the served weights, from the data it keeps; False
        when it keeps none (a model saved before it did) or is already in force."""
        q = self.quality
        if q is None or q.data_ is None or self.quality_in_force() is not None:
            return False
        self.quality = QualityEstimator(q.config, num_threads=self.runtime.threads
                                        ).fit_data(q.data_, self.weights)
        return True

    def suggest(self, records: Sequence[Record], request: SuggestRequest) -> list[Tagged]:
        """Each record's top ``request.limit`` scoring ≥ its threshold, with reasons, and
        what else the request asks for from the same pass: the quality estimate of that
        list, the top ``depth`` uncut, the neighbour records (`Source.record_neighbours`).
        Exclusions are the recipe's (`tagalign.recipes.Recipe.suggest`), not this one's.

        A large batch is split into parts on the runtime's parts pool (one per thread, each
        part's libraries on one thread), results in order."""
        if request.limit is None or request.exclude:
            raise ValueError("the pipeline takes a request with a limit and no exclusions")
        return self._in_parts(records, request, request.limit)

    def rank(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        """Each record's plain ranking (as `SuggestRequest.ranking` asks) of any
        ``limit``: a recipe's exclusions may ask past a request's bound
        (`tagalign.recipes.Recipe._excluding`)."""
        return [t.suggestions for t in self._in_parts(records, PLAIN, limit)]

    def _in_parts(self, records: Sequence[Record], request: SuggestRequest, limit: int
                  ) -> list[Tagged]:
        n = min(self.runtime.n_threads, len(records) // MIN_PART)
        pool = self.runtime.parts_pool() if n >= 2 else None
        if pool is None:
            return self._tag(records, request, limit, None)
        bounds = np.linspace(0, len(records), n + 1).astype(int)
        futures = [pool.submit(self._tag, records[a:b], request, limit, 1)
                   for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return [row for f in futures for row in f.result()]

    def _tag(self, records: Sequence[Record], request: SuggestRequest, limit: int,
             threads: int | None) -> list[Tagged]:
        """``limit`` instead of the request's (`rank`)."""
        threshold, depth = request.floor, request.depth
        batch = self.prepare(records, threads)
        ranked, qualities = self._rank(batch, limit, threshold if request.quality else None,
                                       depth)
        nbrs = self.record_neighbours(batch) if request.neighbours else None
        out = []
        for i, (row, q) in enumerate(zip(ranked, qualities, strict=True)):
            found = self._suggestions(batch, i, row)
            out.append(Tagged(keep_above(found[:limit], threshold), quality=q,
                              ranking=found[:depth] if depth else None,
                              neighbours=None if nbrs is None else nbrs[i]))
        return out

    def record_neighbours(self, batch: Batch) -> list[Neighbours]:
        """Each record's neighbour records by source name, from the searches of a batch the
        sources saw in `candidates` (`Source.record_neighbours`; {} without such sources)."""
        nbrs: list[Neighbours] = [{} for _ in batch.records]
        for src in self.sources:
            for i, row in enumerate(src.record_neighbours(batch) or ()):
                nbrs[i][src.name] = row
        return nbrs

    def _suggestions(self, batch: Batch, r: int, row: list[tuple[int, float, list[str]]]
                     ) -> list[Suggestion]:
        """Record ``r``'s subjects with their reasons: the sources that proposed each and
        what each source says of it (`Source.reasons`; lists joined, `MAX_REASON_ITEMS`)."""
        lang = batch.languages[r]
        positions = [pos for pos, _, _ in row]
        said = [s.reasons(batch, r, positions) for s in self.sources]
        out = []
        for pos, score, sources in row:
            subj = self.vocab.subjects[pos]
            reasons: dict[str, Any] = {"sources": sources}
            for by_pos in said:
                for key, value in by_pos.get(pos, {}).items():
                    if isinstance(value, list):
                        joined = reasons.get(key, []) + [v for v in value
                                                         if v not in reasons.get(key, [])]
                        reasons[key] = joined[:MAX_REASON_ITEMS]
                    else:
                        reasons.setdefault(key, value)
            out.append(Suggestion(subj.id, float(score), subj.label(lang), reasons))
        return out

    def learn(self, records: Sequence[Record], batch_size: int = 1024) -> None:
        """Each record's latest decision, one memory row per record id.

        A record the memory holds with the same text gets its row's labels replaced (no
        new row, its vectors unchanged; no subjects: the row stops voting). One held with
        another text has its old row's labels cleared (the TF-IDF neighbours drop its
        vector; an embedding index cannot, so there it stays a neighbour that votes for
        nothing) and joins as a new row, as does a new record with subjects: the sources
        learn those (`Source.learn`). Of one id given twice, the later record counts."""
        latest = list({r.id: r for r in records}.values())
        for start in range(0, len(latest), batch_size):
            chunk = latest[start:start + batch_size]
            fresh, cleared = self.memory.relabel(chunk, label_matrix(chunk, self.vocab))
            if len(cleared):
                for src in self.sources:
                    src.forget(cleared)
            if not fresh:
                continue
            new = [chunk[i] for i in fresh]
            batch = self.prepare(new)
            rows = self.memory.append(new, batch.languages, label_matrix(new, self.vocab))
            for src in self.sources:
                src.learn(batch, rows)

    def blinded(self, withheld: np.ndarray) -> HybridPipeline:
        """This pipeline as if no training record had carried the subjects where
        ``withheld`` is true (the tail simulated for the ranker's table, issue 66): each
        source's view (`Source.blind`: the learned ones propose none of them), their prior
        that of a subject no record carries and no co-assignments. Parts are shared, not
        copied; only for making features.

        What it cannot take back: the static encoder learned from these records, so their
        label rows may sit nearer their records than a new heading's would."""
        prior, floor = self.prior, self.unseen_prior
        if floor is not None:  # priors to blind
            prior = np.where(withheld[:len(prior)], floor, prior).astype(np.float32)
        return replace(self, sources=[s.blind(withheld) for s in self.sources], prior=prior,
                       co=None if self.co is None else self.co.without(withheld))

    def take_vocabulary(self, vocab: Vocabulary, headings: NewHeadings,
                        redirected: dict[int, int]) -> None:
        """Suggest with ``vocab``, an update of the vocabulary trained with (every old
        position kept: `tagalign.vocab.changes.apply`), without retraining: the sources
        take its new and relabelled ``headings`` (`Source.take_headings`), the per-subject
        parts grow to its size, and a newly ``redirected`` heading's prior (old position →
        its target's) counts for its target."""
        n = len(vocab)
        ctx = FitContext(vocab, self.analyzer, self.memory, Y=self.memory.Y,
                         encoder=self.encoder)
        for src in self.sources:
            src.take_headings(headings, ctx)
        self.memory.widen(n)
        if self.co is not None:
            self.co = self.co.widened(n)
        if len(self.prior):
            prior = np.concatenate([self.prior, np.full(n - len(self.prior),
                                                        self.unseen_prior, np.float32)])
            for old, target in redirected.items():
                prior[target] = np.logaddexp(prior[target], prior[old])
            self.prior = prior.astype(np.float32)
        self.vocab = vocab
        self.has_english_ = None

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: Path, meta: dict[str, Any] | None = None) -> None:
        """Each part into its own folder of ``path``; ``hybrid.json`` names the sources in
        order (and holds ``meta``, e.g. the training's timings)."""
        self.featurizer.save(path / "tfidf")
        self.memory.save(path / "memory")
        trained(self.ranker, "the hybrid pipeline").save(path / "ranker")
        if self.quality is not None:
            self.quality.save(path / "quality")
        save_npy_atomic(path / "prior.npy", self.prior)
        if self.co is not None:
            self.co.save(path / "co")
        if self.encoder is not None:
            self.encoder.save(path / "encoder")
        for src in self.sources:
            (path / "sources" / src.name).mkdir(parents=True, exist_ok=True)
            src.save(path / "sources" / src.name)
        write_json_atomic(path / "hybrid.json", {"sources": [s.name for s in self.sources],
                                                 **(meta or {})})

    @classmethod
    def load(cls, path: Path, vocab: Vocabulary, config: HybridConfig, *,
             runtime: Runtime, mmap: bool = False) -> HybridPipeline:
        """What `save` wrote; the sources are built from the recipe's ``config``
        (`HybridConfig.new_source`: candidate counts may have been tuned since training),
        which also says which parts the model has (the encoder, the quality estimate, the
        co-assignments: one missing from ``path`` is refused, `ModelFormatError`).
        ``mmap``: the record memory's label lists, the TF-IDF neighbours' record matrices,
        the vector indexes and the co-assignments are mapped from their files."""
        def part(name: str) -> Path:
            if not (path / name).exists():
                raise ModelFormatError(
                    f"{path} has no {name!r}, which its parameters say it has: the model was "
                    "saved by an older tagalign or is incomplete; retrain the project "
                    "(tagalign train)")
            return path / name

        meta = read_json(part("hybrid.json"))
        memory = RecordMemory.load(part("memory"), mmap=mmap)
        ctx = FitContext(vocab, Analyzer(), memory, Y=memory.Y, mmap=mmap,
                         encoder=StaticEmbeddingEncoder.load(part("encoder"))
                         if config.uses_embeddings else None)
        sources = []
        for name in meta["sources"]:
            src = config.new_source(name)
            src.load_state(part(f"sources/{name}"), ctx)
            sources.append(src)
        ranker = FusionRanker.load(part("ranker"))
        if runtime.compile_ranker:
            ranker.compile(runtime.cache_dir)
        return cls(vocab, ctx.analyzer, TfidfFeaturizer.load(part("tfidf")), memory, sources,
                   ctx.encoder, ranker, load_npy(part("prior.npy")),
                   QualityEstimator.load(part("quality")) if config.quality else None,
                   config.prior_weight, config.support_weight, config.unseen_weight,
                   CoAssignment.load(part("co"), mmap=mmap) if config.agreement else None,
                   runtime)
