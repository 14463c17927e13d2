"""Candidate sources of the hybrid tagger (Annif-style backends) and their shared batch.

Each source proposes subjects for a batch of records with a few numeric features per
(record, subject) pair. The fusion ranker (`tagalign.suggest.fusion`) merges the pairs of
all sources and scores them. Sources are small classes behind the `SOURCES` registry; each
takes its settings as one typed `SourceConfig`, a part of the hybrid's config
(`tagalign.suggest.config.HybridConfig.new_source` builds a source from it).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import scipy.sparse as sp

from tagalign.encode.base import Encoder
from tagalign.errors import trained
from tagalign.params import PartConfig
from tagalign.records import Record
from tagalign.registry import Registry
from tagalign.runtime import ProgressCallback
from tagalign.suggest.sources.memory import RecordMemory
from tagalign.text import Analyzer, guess_language
from tagalign.vocab import Vocabulary

T = TypeVar("T")
SOURCES: Registry[type[Source]] = Registry("source")
register_source = SOURCES.register


@dataclass
class Batch:
    """Records plus the representations several sources share (computed once per batch)."""

    records: Sequence[Record]
    languages: list[str]
    tokens: list[list[str]] = field(default_factory=list)
    title_tokens: list[list[str]] = field(default_factory=list)
    #: per language: (row indices into ``records``, L2-normalised TF-IDF rows)
    tfidf: dict[str, tuple[np.ndarray, sp.csr_matrix]] = field(default_factory=dict)
    #: (n, d) L2-normalised record embeddings of the hybrid's own encoder
    embeddings: np.ndarray | None = None
    #: (n, d) embeddings of the records' titles alone, by the same encoder: made only when
    #: a source asks for them (`Source.embeds_titles`)
    title_embeddings: np.ndarray | None = None
    #: per-source evidence kept for reasons (neighbour rows, matched labels); per batch, so
    #: concurrent requests never see each other's evidence
    evidence: dict[str, Any] = field(default_factory=dict)
    #: threads the sources may use on this batch (`tagalign.runtime.Runtime`; 1 in each
    #: part of a batch split between threads)
    threads: int = 1
    #: threads a source may split its rows over (``threads`` of them at most; None: none)
    pool: Executor | None = None

    def __len__(self) -> int:
        return len(self.records)

    @classmethod
    def tokenised(cls, records: Sequence[Record], analyzer: Analyzer, threads: int = 1,
                  pool: Executor | None = None) -> Batch:
        """The records with their languages and the analyzer's text and title tokens: what
        every source reads (TF-IDF rows and embeddings are the pipeline's to add)."""
        langs = record_languages(records)
        return cls(records, langs,
                   [analyzer.tokens(r.text, lg) for r, lg in zip(records, langs, strict=True)],
                   [analyzer.tokens(r.title, lg) for r, lg in zip(records, langs, strict=True)],
                   threads=threads, pool=pool)


def record_languages(records: Sequence[Record]) -> list[str]:
    """Each record's language as the sources know them: its own when German or English,
    else the one its text reads as."""
    return [r.language if r.language in ("de", "en") else guess_language(r.text)
            for r in records]


@dataclass
class Candidates:
    """Sparse (record row, subject position) pairs with named features."""

    rows: np.ndarray
    cols: np.ndarray
    feats: np.ndarray
    names: list[str]

    @classmethod
    def from_lists(cls, rows: list[int], cols: list[int], feats, names: list[str]
                   ) -> Candidates:
        """From Python lists built row by row (feats: one row or column stack per pair)."""
        if not rows:
            return cls.empty(names)
        return cls(np.asarray(rows, np.int64), np.asarray(cols, np.int64),
                   np.asarray(feats, np.float32).reshape(len(rows), len(names)), names)

    @classmethod
    def empty(cls, names: list[str]) -> Candidates:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64),
                   np.zeros((0, len(names)), np.float32), names)

    def truncate(self, k: int) -> Candidates:
        """Only each record's first ``k`` (by the ``*_rank`` feature): what the source
        returns with ``top_k=k``, from a run with a larger one (tuning reuses one run).
        Candidates without a rank feature are returned as they are, and so is a pair whose
        rank is NaN (proposed by another query of the source than the one ranked: the label
        index's title query, `LabelRetrievalConfig.title_top_k`)."""
        rank = [i for i, name in enumerate(self.names) if name.endswith("_rank")]
        if not rank:
            return self
        first = self.feats[:, rank[0]]
        keep = (first <= k) | np.isnan(first)
        return Candidates(self.rows[keep], self.cols[keep], self.feats[keep], self.names)


    def followed(self, successor: np.ndarray) -> Candidates:
        """The candidates with each subject replaced by where its evidence goes
        (``successor``: `Vocabulary.successors`: a redirected heading's target, -1 for one
        never suggested, which is dropped). Where a redirected heading and its target both
        were candidates of a record, the better ranked pair stays (by the ``*_rank``
        feature, else the first): scores merged, not duplicated."""
        if len(self.rows) == 0:
            return self
        cols = successor[self.cols]
        if np.array_equal(cols, self.cols):
            return self
        order = np.flatnonzero(cols >= 0)
        rank = [i for i, name in enumerate(self.names) if name.endswith("_rank")]
        if rank:
            order = order[np.argsort(self.feats[order, rank[0]], kind="stable")]
        _, first = np.unique(self.rows[order] * len(successor) + cols[order],
                             return_index=True)
        pick = np.sort(order[first])
        return Candidates(self.rows[pick], cols[pick], self.feats[pick], self.names)


def topk_per_row(scores: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` largest stored entries of each CSR row → (rows, cols, values), rank-ordered."""
    scores = scores.tocsr()
    rows, cols, vals = [], [], []
    indptr, indices, data = scores.indptr, scores.indices, scores.data
    for r in range(scores.shape[0]):
        a, b = indptr[r], indptr[r + 1]
        if a == b:
            continue
        d = data[a:b]
        # ties broken by subject position, so the top k of a wider top-k' run is exactly
        # the top k (`Candidates.truncate`: tuning runs a source once, widest)
        part = np.lexsort((indices[a:b], -d))[:k]
        rows.append(np.full(len(part), r, np.int64))
        cols.append(indices[a:b][part].astype(np.int64))
        vals.append(d[part].astype(np.float32))
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)


def ranks_of(rows: np.ndarray) -> np.ndarray:
    """1-based rank of each entry within its row, for entries already sorted best-first."""
    if len(rows) == 0:
        return np.zeros(0, np.float32)
    starts = np.r_[0, np.flatnonzero(np.diff(rows)) + 1]
    counts = np.diff(np.r_[starts, len(rows)])
    return (np.arange(len(rows)) - np.repeat(starts, counts) + 1).astype(np.float32)


def anchor_mask(rows: np.ndarray, proxy: np.ndarray, top_m: int) -> np.ndarray:
    """Whether each candidate (record ``rows``) is one of its record's *anchors*: its
    ``top_m`` strongest by ``proxy`` (`tagalign.suggest.agreement.rrf`)."""
    rows = np.asarray(rows, np.int64)
    order = np.lexsort((-proxy, rows))
    rank = np.empty(len(rows), np.float32)
    rank[order] = ranks_of(rows[order])
    return rank <= top_m


@dataclass
class FitContext:
    """What a source learns from (`Source.fit`: one split of the training records,
    featurised) or loads beside (`Source.load_state`: the vocabulary, the record memory, the
    encoder; ``tfidf`` and ``Y`` then empty)."""

    vocab: Vocabulary
    analyzer: Analyzer
    #: the records neighbour sources vote with (None: a source fitted on the vocabulary
    #: alone, as the `lexical` recipe's)
    memory: RecordMemory | None = None
    #: per language: (row indices into ``records``, L2-normalised TF-IDF rows)
    tfidf: dict[str, tuple[np.ndarray, sp.csr_matrix]] = field(default_factory=dict)
    #: gold subjects of ``records`` (records × vocabulary)
    Y: sp.csr_matrix | None = None
    embeddings: np.ndarray | None = None
    #: the hybrid's (`tagalign.encode.static.StaticEmbeddingEncoder`)
    encoder: Encoder | None = None
    #: the split's records and their tokens (lexical counts, the `domains` source)
    records: Sequence[Record] = ()
    tokens: list[list[str]] | None = None
    #: loading only: sources map their large arrays from the files (read-only)
    mmap: bool = False
    #: threads fitting may use (0: the libraries' defaults; suggesting takes the batch's)
    threads: int = 0
    #: fitting's long steps by phase (the trainer's, `tagalign.train.stacking.HybridTrainer`;
    #: None: silent)
    progress: ProgressCallback | None = None


@dataclass(frozen=True)
class NewHeadings:
    """Headings of an updated vocabulary (`Source.take_headings`) that a model never
    learned: ``added`` (positions appended after the trained ones) and ``relabelled``
    (positions whose labels were corrected)."""

    added: Sequence[int] = ()
    relabelled: Sequence[int] = ()


@dataclass(frozen=True)
class SourceConfig(PartConfig):
    """A source's settings (`tagalign.params.PartConfig`: fields with defaults and
    ranges). A field ``top_k`` is the source's candidate count, which the hybrid's config
    works out per source (`tagalign.suggest.config.HybridConfig.candidate_count`)."""

    kind: ClassVar[str] = "source config"


#: list-valued reasons several sources give for one subject (neighbour records) are
#: joined and cut to this many
MAX_REASON_ITEMS = 3


class Source(ABC):
    """A trained candidate generator (as Annif's backends). ``features`` names the columns
    it returns; the ranker reads them by name, never by position.

    A source takes its settings as one `SourceConfig` (``config``; or its fields as
    keywords; the hybrid's: `HybridConfig.source_config`), learns from a
    `FitContext` (`fit`) or reloads what `save` wrote into its own folder (`load_state`),
    proposes candidates for a `Batch`, may learn confirmed records at once (`learn`) and
    says why it proposed a subject (`reasons`)."""

    name: ClassVar[str]
    features: ClassVar[list[str]]
    #: the class of its settings (a source without any keeps the empty one)
    config_class: ClassVar[type[SourceConfig]] = SourceConfig
    #: whether `fit` reads ``FitContext.embeddings`` (training embeds the split's records
    #: only when such a source is still to be fitted: a resumed 1M training skipped 258 s)
    fits_on_embeddings: ClassVar[bool] = False
    #: whether it proposes a heading by reading its labels, so needs no training record
    #: carrying it (the label index, the lexical matcher): a suggestion only such sources
    #: proposed is *label-only* (`tagalign.evaluate.label_only`, issue 66)
    reads_labels: ClassVar[bool] = False
    #: the features it gives every candidate of a batch, whichever source proposed it
    #: (`score_pairs`; none by default): evidence of meaning beside the examples, so the
    #: ranker can weigh a heading few training records carry (issue 66)
    pair_features: ClassVar[list[str]] = []

    def __init__(self, config: SourceConfig | None = None, **settings: Any):
        if config is not None and settings:
            raise TypeError(f"source {self.name!r}: a config or settings, not both")
        self.config = config if config is not None else self.config_class(**settings)

    @property
    def embeds_titles(self) -> bool:
        """Whether `candidates` reads ``Batch.title_embeddings`` (the pipeline makes them
        only then)."""
        return False

    def _trained(self, part: T | None) -> T:
        """``part``, set by `fit` or `load_state` (`NotTrainedError` before them)."""
        return trained(part, f"source {self.name!r}")

    def _embeddings(self, given: Batch | FitContext) -> np.ndarray:
        """The records' embeddings, which the pipeline adds for a source that reads them."""
        if given.embeddings is None:
            raise ValueError(f"source {self.name!r} reads the records' embeddings: none given")
        return given.embeddings

    @abstractmethod
    def fit(self, ctx: FitContext) -> None:
        """Learn from one split of the training records."""

    @abstractmethod
    def candidates(self, batch: Batch) -> Candidates:
        """Proposed (record row, subject) pairs with this source's features; evidence
        for `reasons` goes into ``batch.evidence[self.name]``."""

    @abstractmethod
    def save(self, path: Path) -> None:
        """Write the trained state into the (existing, empty) folder ``path``."""

    @abstractmethod
    def load_state(self, path: Path, ctx: FitContext) -> None:
        """Restore what `save` wrote into ``path``."""

    def score_pairs(self, batch: Batch, rows: np.ndarray, cols: np.ndarray,
                    proxy: np.ndarray | None = None) -> np.ndarray:
        """Its `pair_features` (NaN where it has no evidence) of the pairs (record row,
        subject position) of every source's candidates for ``batch`` (after `candidates`);
        ``proxy``: the pairs' fusion of the sources' ranks (`tagalign.suggest.agreement.
        rrf`), by which a source may tell each record's strongest candidates."""
        return np.zeros((len(rows), 0), np.float32)

    def blind(self, withheld: np.ndarray) -> Source:
        """This source as if no training record had carried the subjects where
        ``withheld`` (a boolean per subject position) is true: how it would see a heading
        no record carries (the tail simulated for the ranker's training, issue 66). One
        that proposes by labels is unchanged; one that learned from records proposes none
        of them (`Blinded`). A source with per-subject statistics learned from records
        beside its labels overrides this (the lexical matcher's ``lex_prec``)."""
        return self if self.reads_labels else Blinded(self, withheld)

    def learn(self, batch: Batch, rows: np.ndarray) -> None:  # noqa: B027 - optional hook
        """Add confirmed records at once; ``rows``: their positions in the record memory
        (only neighbour sources do)."""

    def take_headings(self, headings: NewHeadings, ctx: FitContext) -> None:
        """The vocabulary was updated (``ctx.vocab``, every old position kept: `tagalign.
        vocab.changes.apply`) without retraining: a source that knows headings by their
        labels makes them known (new ones suggestable, corrected labels in force); one that
        learned from training records alone only takes the new vocabulary."""
        self.bind(ctx.vocab)

    def bind(self, vocab: Vocabulary) -> None:  # noqa: B027 - optional hook
        """Use ``vocab`` (an update of the one trained with) from now on."""

    def forget(self, rows: np.ndarray) -> None:  # noqa: B027 - optional hook
        """The memory's ``rows`` lost their labels for good (learned again with another
        text): a source that indexes them may stop finding them."""

    def reasons(self, batch: Batch, r: int, positions: Sequence[int]
                ) -> dict[int, dict[str, Any]]:
        """Why this source proposed some of ``positions`` (subject positions) for record
        ``r`` of a batch it saw in `candidates`: subject position → named evidence (a list
        value is joined with other sources' under the same name). None by default."""
        return {}

    def record_neighbours(self, batch: Batch) -> list[list[tuple[str, float]]] | None:
        """Each record's similar memory records as (record id, similarity), nearest first,
        from a batch it saw in `candidates`; None for a source that searches no records."""
        return None


class Blinded(Source):
    """A source's view without some subjects' candidates (`Source.blind`): it proposes,
    scores and explains as the source does, less the ``withheld`` subjects' pairs. Only
    for making features; it is never fitted nor saved."""

    config_class = SourceConfig

    def __init__(self, source: Source, withheld: np.ndarray):
        self.source, self.withheld = source, withheld
        self.name, self.features = source.name, source.features  # type: ignore[misc]
        self.pair_features = source.pair_features  # type: ignore[misc]
        self.config = source.config

    def hidden(self, cols: np.ndarray) -> np.ndarray:
        """Whether each subject position of ``cols`` is withheld (one past the mask: not)."""
        hide = np.zeros(len(cols), bool)
        inside = cols < len(self.withheld)
        hide[inside] = self.withheld[cols[inside]]
        return hide

    def candidates(self, batch: Batch) -> Candidates:
        c = self.source.candidates(batch)
        if len(c.cols) == 0:  # none proposed (or features only: `PairFeatures`)
            return c
        keep = ~self.hidden(c.cols)
        if keep.all():
            return c
        return dataclasses.replace(c, rows=c.rows[keep], cols=c.cols[keep], feats=c.feats[keep])

    @property
    def embeds_titles(self) -> bool:
        return self.source.embeds_titles

    def score_pairs(self, batch: Batch, rows: np.ndarray, cols: np.ndarray,
                    proxy: np.ndarray | None = None) -> np.ndarray:
        """The source's pair features, none for a withheld subject's pairs (NaN): what
        it knows of a subject it learned from the records that carry it."""
        out = self.source.score_pairs(batch, rows, cols, proxy)
        out[self.hidden(cols)] = np.nan
        return out

    def reasons(self, batch: Batch, r: int, positions: Sequence[int]
                ) -> dict[int, dict[str, Any]]:
        return self.source.reasons(batch, r, positions)

    def record_neighbours(self, batch: Batch) -> list[list[tuple[str, float]]] | None:
        return self.source.record_neighbours(batch)

    def fit(self, ctx: FitContext) -> None:
        raise TypeError(f"a blinded view of source {self.name!r} is not fitted")

    def save(self, path: Path) -> None:
        raise TypeError(f"a blinded view of source {self.name!r} is not saved")

    def load_state(self, path: Path, ctx: FitContext) -> None:
        raise TypeError(f"a blinded view of source {self.name!r} is not loaded")
