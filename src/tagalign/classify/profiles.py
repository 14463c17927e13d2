"""Subject → domain profiles: which domains the training records carrying a subject have.

One place for what the hybrid's `domains` source (`classify/source.py`) and the
`subjects-stack` classifier (`classify/stack.py`) both count: the gold domains of the
records (`domain_matrix`) against their gold subjects (`tagalign.suggest.sources.memory.
label_matrix`), ``counts[s, d]`` = training records carrying subject ``s`` and domain ``d``.

`SubjectEvidence` turns a record's ranked subject suggestions into domain evidence through
those profiles, ``P(d|s) = counts[s, d] / Σ_d' counts[s, d']`` (a subject no training
record carries has no profile and gives no evidence).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from tagalign.records import Record
from tagalign.vocab import Vocabulary

#: a record's suggestions as plain input: (subject id, score) best first
Suggested = Sequence[tuple[str, float]]
#: training records' own gold: (records × vocabulary) subjects, (records × domains) domains
Own = tuple[sp.csr_matrix, np.ndarray]


def domain_matrix(records: Sequence[Record], labels: Sequence[str]) -> sp.csr_matrix:
    """(records × labels) 0/1 matrix of gold domains (codes outside ``labels`` ignored)."""
    index = {lab: j for j, lab in enumerate(labels)}
    rows, cols = [], []
    for i, r in enumerate(records):
        for j in sorted({index[d] for d in r.domains if d in index}):
            rows.append(i)
            cols.append(j)
    return sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                         shape=(len(records), len(labels)))


def subject_matrix(vocab: Vocabulary, subjects: Sequence[Sequence[str]]) -> sp.csr_matrix:
    """(records × vocabulary) 0/1 of the records' gold subject ids (ids outside the
    vocabulary dropped), as the record memory counts them."""
    from tagalign.suggest.sources.memory import label_matrix

    recs = [Record(id=str(i), title="", subjects=list(s)) for i, s in enumerate(subjects)]
    return label_matrix(recs, vocab).tocsr()


def subject_domain_counts(subjects: sp.csr_matrix, domains: sp.csr_matrix | np.ndarray
                          ) -> sp.csr_matrix:
    """(subjects × domains) counts from (records × subjects) and (records × domains) 0/1."""
    return (subjects.T.tocsr().astype(np.float32) @ sp.csr_matrix(domains)).tocsr()


#: names of the per-(record, domain) features `SubjectEvidence.features` returns
FEATURES = ("text_prob", "text_rank", "subj_weighted", "subj_rank", "subj_top1", "subj_max",
            "subj_mass", "subj_covered")


class SubjectEvidence:
    """Domain evidence of ranked subject suggestions, from profile counts over a vocabulary.

    ``counts``: (vocabulary × domains), `subject_domain_counts` of the training records;
    ``top_k``: how many suggestions per record are read (the rest are ignored, so a record
    suggested deeper than trained reads what the stacker learned on)."""

    def __init__(self, vocab: Vocabulary, counts: sp.csr_matrix, top_k: int):
        if counts.shape[0] != len(vocab):
            raise ValueError(f"profiles of {counts.shape[0]} subjects for a vocabulary of "
                             f"{len(vocab)}")
        self.vocab, self.counts, self.top_k = vocab, counts.tocsr(), int(top_k)
        total = np.asarray(self.counts.sum(axis=1)).ravel()
        self.has_profile = total > 0
        self.shares = (sp.diags(1.0 / np.maximum(total, 1e-9)) @ self.counts).tocsr() \
            .astype(np.float32)

    @classmethod
    def fit(cls, vocab: Vocabulary, subjects: Sequence[Sequence[str]], domains: np.ndarray,
            top_k: int) -> SubjectEvidence:
        """Profiles of the training records' gold ``subjects`` (ids; outside the vocabulary
        dropped) × their gold ``domains`` (records × domains 0/1)."""
        return cls(vocab, subject_domain_counts(subject_matrix(vocab, subjects), domains),
                   top_k)

    @property
    def n_domains(self) -> int:
        return self.counts.shape[1]

    def grid(self, suggested: Sequence[Suggested]) -> tuple[np.ndarray, np.ndarray]:
        """(records × top_k) vocabulary positions (−1: none or unknown id) and scores."""
        pos = np.full((len(suggested), self.top_k), -1, np.int64)
        score = np.zeros((len(suggested), self.top_k), np.float32)
        for i, row in enumerate(suggested):
            for j, (sid, s) in enumerate(row[: self.top_k]):
                if sid in self.vocab:
                    pos[i, j], score[i, j] = self.vocab.position(sid), s
        return pos, score

    def shares_of(self, pos: np.ndarray, own: Own | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(records × top_k × domains) P(d|s) (0 where no profile) and the profile mask.
        ``own``: the records are training records the profiles counted, as (records ×
        vocabulary) gold subjects and (records × domains) gold domains; each record's own
        count is taken out of the profiles it reads (leave-one-out), so a training record
        reads what a record the profiles never counted would."""
        flat = pos.ravel()
        ok = flat >= 0
        if own is None:
            out = np.zeros((len(flat), self.n_domains), np.float32)
            if ok.any():
                out[ok] = self.shares[flat[ok]].toarray()
            known = np.zeros(len(flat), bool)
            known[ok] = self.has_profile[flat[ok]]
            return (out.reshape(*pos.shape, self.n_domains), known.reshape(pos.shape))
        subjects, domains = own
        rec = np.repeat(np.arange(pos.shape[0]), pos.shape[1])
        counts = np.zeros((len(flat), self.n_domains), np.float32)
        mine = np.zeros(len(flat), bool)
        if ok.any():
            counts[ok] = self.counts[flat[ok]].toarray()
            mine[ok] = np.asarray(subjects[rec[ok], flat[ok]]).ravel() > 0
        counts[mine] -= np.asarray(domains, np.float32)[rec[mine]]
        np.maximum(counts, 0.0, out=counts)
        total = counts.sum(1)
        out = counts / np.maximum(total, 1e-9)[:, None]
        return (out.reshape(*pos.shape, self.n_domains), (total > 0).reshape(pos.shape))

    def weighted(self, suggested: Sequence[Suggested]) -> np.ndarray:
        """(records × domains) Σ score·P(d|s) / Σ score over the suggestions with a profile
        (0 for a record without any): the subjects-only estimate."""
        pos, score = self.grid(suggested)
        shares, known = self.shares_of(pos)
        w = np.where(known, score, 0.0)
        mass = w.sum(1, keepdims=True)
        return (np.einsum("nk,nkd->nd", w, shares) / np.maximum(mass, 1e-9)).astype(np.float32)

    def own(self, subjects: Sequence[Sequence[str]], domains: np.ndarray) -> Own:
        """``own`` of `shares_of` for training records: their gold subject ids (outside
        the vocabulary dropped) and (records × domains) gold domains."""
        return subject_matrix(self.vocab, subjects), np.asarray(domains, np.float32)

    def features(self, text_probs: np.ndarray, suggested: Sequence[Suggested],
                 own: Own | None = None) -> np.ndarray:
        """(records × domains × `FEATURES`) stacking features per (record, domain);
        ``own``: the records are training records (`shares_of`, leave-one-out)."""
        n, n_dom = len(suggested), self.n_domains
        if text_probs.shape != (n, n_dom):
            raise ValueError(f"text probabilities {text_probs.shape} for {n} records × "
                             f"{n_dom} domains")
        pos, score = self.grid(suggested)
        shares, known = self.shares_of(pos, own)
        w = np.where(known, score, 0.0)
        mass = w.sum(1)
        weighted = np.einsum("nk,nkd->nd", w, shares) / np.maximum(mass, 1e-9)[:, None]
        first = known.argmax(1)  # the best-ranked suggestion with a profile
        top1 = np.where(np.any(known, 1)[:, None], shares[np.arange(n), first], 0.0)
        out = np.empty((n, n_dom, len(FEATURES)), np.float32)
        out[..., 0] = text_probs
        out[..., 1] = _ranks(text_probs)
        out[..., 2] = weighted
        out[..., 3] = _ranks(weighted)
        out[..., 4] = top1
        out[..., 5] = shares.max(1) if self.top_k else 0.0
        out[..., 6] = mass[:, None]
        out[..., 7] = known.sum(1)[:, None]
        return out

    def describe(self) -> dict[str, Any]:
        return {"subjects_with_profile": int(self.has_profile.sum()), "top_k": self.top_k}


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Per row, each column's rank (0 = highest score; ties by column order)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(scores.shape[1])[None, :], axis=1)
    return ranks.astype(np.float32)
