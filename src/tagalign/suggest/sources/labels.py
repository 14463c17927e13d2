"""Label retrieval: record embedding vs every subject's label embedding.

The only source that can suggest subjects never seen in training. Subjects are embedded
once (German preferred label; English label averaged in where the vocabulary has one).
Each alternative label is one more row of the index pointing at its subject, so a record
near "Mykologie" finds "Pilze" when the vocabulary lists it as an alternative label; a
subject's score is that of its nearest row. A vocabulary without alternative labels gives
an index of one row per subject, searched as before they were indexed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.encode.base import normalise
from tagalign.errors import ModelFormatError
from tagalign.index import LazyRows, VectorIndex
from tagalign.io import load_npy, read_json, save_npy_atomic, write_json_atomic
from tagalign.params import NonNegative, Positive
from tagalign.suggest.sources.base import (
    Batch,
    Candidates,
    FitContext,
    NewHeadings,
    Source,
    SourceConfig,
    anchor_mask,
    ranks_of,
    register_source,
)

log = logging.getLogger(__name__)
#: the rows of the trained vocabulary's subjects, and those that name none any more, once a
#: vocabulary update added rows (`LabelRetrieval.take_headings`)
SUBJECT_ROWS = "subject-rows.json"
#: the title query's candidate count, saved by a model trained with one
TITLE_QUERY = "title-query.json"


def subject_rows(vocab, encoder, chunk: int = 100_000) -> LazyRows:
    """Each subject's row, made as the index asks for it: its German label's vector, plus
    its English label's where it has one, normalised again (when any subject has one)."""
    has_en = any("en" in s.labels for s in vocab.subjects)

    def make(positions: np.ndarray) -> np.ndarray:
        subjects = [vocab.subjects[i] for i in positions.tolist()]
        de = np.asarray(encoder.encode([s.label("de") for s in subjects]), np.float32)
        en_pos = [j for j, s in enumerate(subjects) if "en" in s.labels]
        if en_pos:
            de[en_pos] += encoder.encode([subjects[j].labels["en"] for j in en_pos])
        return normalise(de, inplace=True) if has_en else de

    return LazyRows(len(vocab), make, chunk)


def text_rows(encoder, texts: Sequence[str], chunk: int = 100_000) -> LazyRows:
    """``texts`` encoded and L2-normalised, as the index asks for them: the encoder's
    batches and the norm's temporaries cost a chunk, not all (2.86M labels of a
    1.5M-heading vocabulary; issue 48); each row as all texts encoded at once give it."""

    def make(positions: np.ndarray) -> np.ndarray:
        return normalise(encoder.encode([texts[i] for i in positions.tolist()]), inplace=True)

    return LazyRows(len(texts), make, chunk)


def alt_label_rows(vocab, positions: Sequence[int] | None = None
                   ) -> tuple[list[str], np.ndarray]:
    """(alternative labels, the subject position of each): every language's, in vocabulary
    order (of ``positions`` only, where given), without repeats of a subject's other
    labels."""
    labels: list[str] = []
    owners: list[int] = []
    chosen = range(len(vocab)) if positions is None else positions
    for pos in chosen:
        s = vocab.subjects[pos]
        seen = set(s.labels.values())
        for alts in s.alt_labels.values():
            for alt in alts:
                if alt and alt not in seen:
                    seen.add(alt)
                    labels.append(alt)
                    owners.append(pos)
    return labels, np.asarray(owners, np.int64)


def best_per_subject(sims: np.ndarray, rows: np.ndarray, owner: np.ndarray, k: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Index hits (best first) → each record's ``k`` best distinct subjects: (scores,
    subject positions, the row that scored, whether every record got ``k`` or all rows
    were searched); -1 pads."""
    n = len(sims)
    out_s = np.full((n, k), -np.inf, np.float32)
    out_p = np.full((n, k), -1, np.int64)
    out_r = np.full((n, k), -1, np.int64)
    complete = True
    subjects = np.where(rows >= 0, owner[np.clip(rows, 0, None)], -1)
    for r in range(n):
        j = 0
        seen: set[int] = set()
        for s, p, row in zip(sims[r].tolist(), subjects[r].tolist(), rows[r].tolist(),
                             strict=True):
            if p < 0 or p in seen:
                continue
            seen.add(p)
            out_s[r, j], out_p[r, j], out_r[r, j] = s, p, row
            j += 1
            if j == k:
                break
        complete &= j == k or rows.shape[1] == 0 or rows[r, -1] < 0
    return out_s, out_p, out_r, complete


def _pairs(sims: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(record rows, subject positions, scores) of a search's found hits, best first."""
    n, k = pos.shape
    rows = np.repeat(np.arange(n), k)
    ok = pos.ravel() >= 0
    return rows[ok], pos.ravel()[ok].astype(np.int64), sims.ravel()[ok]


#: `anchor_agreement`: the candidate's label row against its record's anchors' (the
#: highest and the mean cosine)
ANCHOR_FEATURES = ["label_anchor_max", "label_anchor_mean"]


def anchor_agreement(rows: np.ndarray, is_anchor: np.ndarray, vecs: np.ndarray
                     ) -> np.ndarray:
    """(n, 2) `ANCHOR_FEATURES` of pairs grouped by record (``rows`` sorted) with their
    subjects' label rows ``vecs``: the highest and the mean cosine of each pair's row with
    those of its record's anchors (``is_anchor``), itself left out (NaN: no other anchor).

    A record at a time, its rows a view of ``vecs`` (grouped, so no copy) against its few
    anchors' (issue 66: a padded product of all records at once, or a record's rows
    gathered, read each row two more times and cost 0.40 and 0.37 ms a record)."""
    n = len(rows)
    out = np.full((n, len(ANCHOR_FEATURES)), np.nan, np.float32)
    if n == 0 or not is_anchor.any():
        return out
    bounds = np.r_[0, np.flatnonzero(np.diff(rows)) + 1, n]
    for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        own = np.flatnonzero(is_anchor[s:e])
        if not len(own):
            continue
        sims = vecs[s:e] @ vecs[s + own].T  # (the record's pairs, its anchors)
        count = np.full(e - s, len(own))
        count[own] -= 1
        total = sims.sum(axis=1)
        total[own] -= sims[own, np.arange(len(own))]
        sims[own, np.arange(len(own))] = -np.inf
        has = count > 0
        out[s:e][has, 0] = sims.max(axis=1)[has]
        out[s:e][has, 1] = total[has] / count[has]
    return out


@dataclass(frozen=True)
class LabelRetrievalConfig(SourceConfig):
    """The ``top_k`` subjects whose label vectors are nearest a record's, searched in a
    `VectorIndex` of kind ``index``."""

    top_k: Positive = 40
    index: str = "ivf"
    #: the inverted lists an ``ivf`` index scans a query (of about 4·√rows). Issue 66: a
    #: record's embedding lies away from the label rows' clusters, so the index's own 24
    #: of 1,809 lists found 79 % of the exact top 30 (2,000 dev records, a 20k model) and
    #: 0.269 of the unseen gold against the exact search's 0.309; 48 lists find 84 % and
    #: 0.291 in 0.64 ms a record (24: 0.34 ms; 96: 88 %, 0.293, 1.24 ms; exact: 23 ms)
    nprobe: Positive = 48
    #: an ``ivf`` index of this many rows or more (labels: preferred and alternative)
    #: stores one byte a dimension (``ivfsq8``; None: never). Issue 48: the 2.86M label
    #: rows of a 1.5M-heading vocabulary took 4.2 GiB as ``ivf``, 1.05 GiB so, with the
    #: same dev avg R (0.5212 against 0.5211) and twice the queries/s; the 205k subject
    #: headings' ~283,000 rows stay ``ivf``
    compress_rows: Positive | None = 1_000_000
    #: the index is searched with the title's embedding too, and its best ``title_top_k``
    #: subjects join the candidates (``label_title_sim``, ``label_title_rank``; 0: no title
    #: query). A record's text averages all it is about; its title names the topic, and
    #: the specific heading a long abstract dilutes is often nearest the title. Issue 66
    #: (2,000 dev records, a 20k model, top 30 each): of the unseen gold the text query and
    #: the lexical matcher reach 0.488, the title query adds 0.041 (rare +0.031, common
    #: +0.032) with 19 new candidates a record; trained with it, a 20k model's avg R@5..20
    #: rose 0.5948 → 0.6030, F1@5 0.3268 → 0.3317, unseen R@20 0.3225 → 0.3392
    #: (`benchmarks/quality/tail.py`). A subject only the title found has the record's
    #: similarity to its own row as ``label_sim`` and no ``label_rank``. Saved with the
    #: model (``title-query.json``): a model saved without it searches with the text alone
    title_top_k: NonNegative = 30
    #: the inverted lists the title query scans (None: ``nprobe``'s). Issue 66: 16 find
    #: 87 % of the unseen gold that 48 add beyond the text query, in 0.20 ms a record
    #: against 0.56 (2,000 dev records, a 20k model, one thread)
    title_nprobe: Positive | None = None
    #: the record's strongest candidates (its *anchors*, by `tagalign.suggest.agreement.
    #: rrf`) each candidate's own row is compared with (``label_anchor_max`` / ``_mean``;
    #: 0: none). Issue 66: the co-assignment features say whether a candidate goes with
    #: the record's likely subjects, but only for subjects assigned in training; these say
    #: it of any heading by its label's meaning, so a new heading among energy anchors
    #: (``Power-to-Gas``) is told from a stray word match (``schade`` for ``Schäden``)
    anchors: NonNegative = 10


@register_source
class LabelRetrieval(Source):
    name = "labels"
    reads_labels = True
    features = ["label_sim", "label_rank", "label_gap", "label_title_sim", "label_title_rank"]
    #: the record's similarity to the heading's own row (preferred labels), for every
    #: candidate: a heading that the label trees or the record neighbours proposed, or that
    #: only a word of the text matched (`lexical`: ``Schade`` for ``Schäden``), is weighed by
    #: its meaning too, not only the label index's top ``top_k``
    pair_features = ["label_cos"]
    config_class = LabelRetrievalConfig
    config: LabelRetrievalConfig

    def __init__(self, config: LabelRetrievalConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        self.pair_features = ["label_cos", *(  # type: ignore[misc]  # by the config
            ANCHOR_FEATURES if self.config.anchors else [])]
        self.index_: VectorIndex | None = None
        #: subject position of each index row (None: one row per subject, in order)
        self.owner_: np.ndarray | None = None
        self.n_subjects_ = 0
        #: the text of each row after the subjects' (None: a preferred label's row, added
        #: by a vocabulary update)
        self.alt_labels_: list[str | None] = []
        #: rows whose subject an update relabelled (`take_headings`): they name none now
        self.disowned_: list[int] = []
        self._own_rows: np.ndarray | None = None  # `own_rows`, made on first use

    def fit(self, ctx: FitContext) -> None:
        # the rows are made as the index asks for them, never all at once (issue 48: a
        # 1.5M-heading vocabulary's label index peaked at 12.7 GiB built from whole arrays)
        self.n_subjects_ = len(ctx.vocab)
        labels, owners = alt_label_rows(ctx.vocab)
        parts = [subject_rows(ctx.vocab, ctx.encoder)]
        if labels:
            parts.append(text_rows(ctx.encoder, labels))
            self._set_rows(labels, owners)
        self.index_ = VectorIndex(self.index_kind(sum(len(p) for p in parts)),
                                  nprobe=self.config.nprobe).build(parts)

    def index_kind(self, rows: int) -> str:
        """The index kind for ``rows`` label rows: ``index``, compressed from
        ``compress_rows`` rows."""
        cap = self.config.compress_rows
        if self.config.index == "ivf" and cap is not None and rows >= cap:
            log.info("labels: %d label rows, an ivfsq8 index (compress_rows %d)", rows, cap)
            return "ivfsq8"
        return self.config.index

    def _set_rows(self, labels: Sequence[str | None], owners: np.ndarray) -> None:
        self.alt_labels_ = list(labels)
        self.owner_ = np.concatenate([np.arange(self.n_subjects_, dtype=np.int64), owners])

    @property
    def embeds_titles(self) -> bool:
        return self.config.title_top_k > 0

    def _search(self, q: np.ndarray, top_k: int | None = None, nprobe: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(scores, subject positions, the rows that scored or None) of each query's
        ``top_k`` (default the config's) best subjects, scanning ``nprobe`` lists (default
        the index's). With alternative-label rows several
        rows may name one subject: the search widens until each record has ``top_k``
        distinct ones (so a narrower ``top_k`` is a prefix of a wider one, as
        `Candidates.truncate` needs)."""
        top_k = self.config.top_k if top_k is None else top_k
        index = self._trained(self.index_)
        if self.owner_ is None:
            sims, pos = index.search(q, top_k, nprobe)
            return sims, pos, None
        width = 2 * top_k
        while True:
            sims, rows = index.search(q, width, nprobe)
            out_s, out_p, out_r, complete = best_per_subject(sims, rows, self.owner_, top_k)
            if complete or width >= len(index):
                return out_s, out_p, out_r
            width *= 2

    def candidates(self, batch: Batch) -> Candidates:
        q = np.ascontiguousarray(batch.embeddings, dtype=np.float32)
        sims, pos, rows = self._search(q)
        if rows is not None:  # which subjects an alternative label found, for `reasons`
            batch.evidence[self.name] = self._matched(pos, rows)
        rows_, cols, vals = _pairs(sims, pos)
        gap = vals - sims[:, 0][rows_]
        nan = np.full(len(rows_), np.nan, np.float32)
        feats = np.column_stack([vals, ranks_of(rows_), gap, nan, nan]).astype(np.float32)
        if self.config.title_top_k and len(batch):
            return self._with_titles(batch, rows_, cols, feats, sims[:, 0])
        return Candidates(rows_, cols, feats, self.features)

    def _matched(self, pos: np.ndarray, rows: np.ndarray) -> list[dict[int, str]]:
        """Per record: subject position → the alternative label whose row found it."""
        return [{int(p): label for p, row in zip(pos[r].tolist(), rows[r].tolist(), strict=True)
                 if row >= self.n_subjects_
                 and (label := self.alt_labels_[row - self.n_subjects_]) is not None}
                for r in range(len(rows))]

    def _with_titles(self, batch: Batch, rows_: np.ndarray, cols: np.ndarray,
                     feats: np.ndarray, best: np.ndarray) -> Candidates:
        """The text query's candidates (``feats``; ``best``: each record's best text
        similarity) joined by the title query's best ``title_top_k``: a subject both found
        gets the title's similarity and rank beside its own; one the title alone found gets
        the record's similarity to its own row as ``label_sim`` (and the gap to ``best``:
        the source proposed it, `HybridPipeline.features`' support) but no ``label_rank``
        (so `Candidates.truncate` leaves it). A record without a title has no title
        query."""
        if batch.title_embeddings is None:
            raise ValueError("source 'labels' with title_top_k reads the titles' embeddings: "
                             "none given")
        q = np.ascontiguousarray(batch.title_embeddings, dtype=np.float32)
        sims, pos, hit_rows = self._search(q, self.config.title_top_k,
                                           self.config.title_nprobe)
        has_title = np.asarray([bool(r.title.strip()) for r in batch.records])
        pos = np.where(has_title[:, None], pos, -1)
        found = batch.evidence.get(self.name)
        if hit_rows is not None and found is not None:  # the text query's label wins
            for r, by_title in enumerate(self._matched(pos, hit_rows)):
                found[r] = {**by_title, **found[r]}
        t_rows, t_cols, t_vals = _pairs(sims, pos)
        t_rank = ranks_of(t_rows)
        width = max(int(cols.max(initial=-1)), int(t_cols.max(initial=-1))) + 1
        text_keys, title_keys = rows_ * width + cols, t_rows * width + t_cols
        if len(title_keys):
            order = np.argsort(title_keys, kind="stable")
            ordered = title_keys[order]
            at = np.minimum(np.searchsorted(ordered, text_keys), len(order) - 1)
            both = ordered[at] == text_keys
            feats[both, 3] = t_vals[order][at[both]]
            feats[both, 4] = t_rank[order][at[both]]
        alone = ~np.isin(title_keys, text_keys)
        a_rows = t_rows[alone]
        text_sim = self.score_pairs(batch, a_rows, t_cols[alone])[:, 0]
        extra = np.column_stack([text_sim, np.full(len(a_rows), np.nan, np.float32),
                                 text_sim - best[a_rows], t_vals[alone], t_rank[alone]])
        all_rows = np.concatenate([rows_, a_rows])
        order = np.argsort(all_rows, kind="stable")  # each record's pairs together
        return Candidates(all_rows[order], np.concatenate([cols, t_cols[alone]])[order],
                          np.vstack([feats, extra]).astype(np.float32)[order], self.features)

    def own_rows(self) -> np.ndarray:
        """Each subject position's own row (its preferred labels' vector; -1: none): the
        trained subjects' first rows, or the row a vocabulary update appended for a new or
        relabelled heading (`take_headings`; the later row wins)."""
        if self._own_rows is None:
            n = len(self._trained(self.index_))
            owner = self.owner_ if self.owner_ is not None else np.arange(n, dtype=np.int64)
            own = np.arange(len(owner)) < self.n_subjects_
            own[self.n_subjects_:] = [label is None for label in self.alt_labels_]
            pick = np.flatnonzero(own & (owner >= 0))
            rows = np.full(int(owner.max(initial=-1)) + 1, -1, np.int64)
            rows[owner[pick]] = pick
            self._own_rows = rows
        return self._own_rows

    def score_pairs(self, batch: Batch, rows: np.ndarray, cols: np.ndarray,
                    proxy: np.ndarray | None = None, chunk: int = 8_192) -> np.ndarray:
        """``label_cos``: the cosine of each pair's record embedding and its subject's own
        row, read back from the index (no second copy of the vectors), about ``chunk``
        pairs at a time; NaN for a subject without a row. Then, with ``anchors`` and a
        ``proxy``, `ANCHOR_FEATURES` from the same rows (`anchor_agreement`; NaN without
        a ``proxy``)."""
        q = self._embeddings(batch)
        own = self.own_rows()
        where = np.full(len(cols), -1, np.int64)
        known = cols < len(own)
        where[known] = own[cols[known]]
        out = np.full((len(rows), len(self.pair_features)), np.nan, np.float32)
        ok = np.flatnonzero(where >= 0)
        anchor_proxy = proxy if self.config.anchors else None
        with_anchors = anchor_proxy is not None
        is_anchor = np.zeros(len(rows), bool)
        if anchor_proxy is not None:  # each record's pairs together, its anchors among
            ok = ok[np.argsort(rows[ok], kind="stable")]  # those with rows
            is_anchor[ok] = anchor_mask(rows[ok], anchor_proxy[ok], self.config.anchors)
        index = self._trained(self.index_)
        by_record = rows[ok]  # sorted with anchors
        start = 0
        while start < len(ok):
            end = min(start + chunk, len(ok))
            if with_anchors and end < len(ok):  # a record's pairs in one block
                cut = int(np.searchsorted(by_record, by_record[end]))
                end = cut if cut > start else int(
                    np.searchsorted(by_record, by_record[start], side="right"))
            sel = ok[start:end]
            vecs = index.rows(where[sel])
            out[sel, 0] = np.einsum("ij,ij->i", q[rows[sel]], vecs)
            if with_anchors:
                out[sel, 1:] = anchor_agreement(rows[sel], is_anchor[sel], vecs)
            start = end
        return out

    def reasons(self, batch: Batch, r: int, positions: Sequence[int]
                ) -> dict[int, dict[str, Any]]:
        """``matched``: the alternative label nearest the record, where one (not the
        preferred label) found the subject."""
        found = batch.evidence.get(self.name)
        if not found:
            return {}
        return {pos: {"matched": found[r][pos]} for pos in positions if pos in found[r]}

    def take_headings(self, headings: NewHeadings, ctx: FitContext) -> None:
        """Rows for the new and the relabelled headings (preferred and alternative labels,
        made with the model's encoder, as training made them), appended to the index; the
        rows of a relabelled heading's old labels name no subject any more."""
        index = self._trained(self.index_)
        if ctx.encoder is None:
            raise ValueError("source 'labels' makes label rows with the model's encoder: none")
        owner = (self.owner_ if self.owner_ is not None
                 else np.arange(self.n_subjects_, dtype=np.int64)).copy()
        changed = np.asarray(headings.relabelled, np.int64)
        if len(changed):
            gone = np.flatnonzero(np.isin(owner, changed))
            owner[gone] = -1
            self.disowned_ = sorted({*self.disowned_, *gone[gone < self.n_subjects_].tolist()})
        positions = np.asarray([*sorted(headings.relabelled), *headings.added], np.int64)
        if len(positions):
            labels, owners = alt_label_rows(ctx.vocab, positions.tolist())
            parts = [subject_rows(ctx.vocab, ctx.encoder)[positions]]
            if labels:
                parts.append(text_rows(ctx.encoder, labels)[np.arange(len(labels))])
            index.add(np.vstack(parts))
            owner = np.concatenate([owner, positions, owners])
            self.alt_labels_ = [*self.alt_labels_, *([None] * len(positions)), *labels]
        self.owner_ = owner
        self._own_rows = None

    def save(self, path: Path) -> None:
        self._trained(self.index_).save(path / "index")
        if self.config.title_top_k:  # the ranker learned the title query's candidates
            write_json_atomic(path / TITLE_QUERY, {"title_top_k": self.config.title_top_k})
        if self.owner_ is not None:  # only with alternative labels: else as before them
            save_npy_atomic(path / "alt-owners.npy", self.owner_[self.n_subjects_:])
            write_json_atomic(path / "alt-labels.json", self.alt_labels_)
        if len(self._trained(self.index_)) != self.n_subjects_ and (
                self.disowned_ or None in self.alt_labels_):  # updated since training
            write_json_atomic(path / SUBJECT_ROWS, {"rows": self.n_subjects_,
                                                    "disowned": self.disowned_})

    def load_state(self, path: Path, ctx: FitContext) -> None:
        # the config's lists, not those the index was saved with: a model saved before the
        # setting searches as wide as a new one
        self.index_ = VectorIndex.load(path / "index", mmap=ctx.mmap).probe(self.config.nprobe)
        self._own_rows = None
        # the title query the ranker learned with, whatever the parameters say now: none
        # for a model saved without the file (every one before the setting)
        title = read_json(path / TITLE_QUERY)["title_top_k"] if (path / TITLE_QUERY).exists() \
            else 0
        self.config = replace(self.config, title_top_k=title)
        self.n_subjects_ = len(ctx.vocab)
        if (path / SUBJECT_ROWS).exists():  # a vocabulary update added rows since training
            rows = read_json(path / SUBJECT_ROWS)
            self.n_subjects_, self.disowned_ = rows["rows"], rows["disowned"]
        extra = len(self.index_) - self.n_subjects_
        if extra <= 0:  # one row per subject (every model saved before alternative labels)
            return
        if not (path / "alt-owners.npy").exists():
            raise ModelFormatError(
                f"{path}: the label index has {extra} rows beyond the vocabulary's "
                f"{self.n_subjects_} subjects but no alt-owners.npy: the model is incomplete "
                "or was trained with another vocabulary; retrain the project (tagalign train)")
        owners = load_npy(path / "alt-owners.npy")
        labels = read_json(path / "alt-labels.json")
        if len(owners) != extra or len(labels) != extra:
            raise ModelFormatError(f"{path}: {len(owners)} alternative-label rows listed, the "
                                   f"index has {extra}; retrain the project (tagalign train)")
        self._set_rows(labels, owners.astype(np.int64))
        if self.disowned_ and self.owner_ is not None:
            self.owner_[self.disowned_] = -1
