"""`domains`: a record's predicted subject domains as evidence for each candidate subject.

A `linear` domain classifier (`tagalign.classify`: TF-IDF + one-vs-rest logistic
regression) learns the records' domains (the LinSearch codes of the ``domains`` field) from
the sources' training split, reusing the hybrid's tokens. Every subject gets a domain
profile: the gold domains of the training records that carry it; a subject no training
record carries borrows, when the vocabulary has GND classification notations, the profile
of the subjects sharing its notations (one pseudo-record). For each candidate the other
sources propose (this source proposes none: `PairFeatures`), the record's predicted domain
probabilities ``p`` meet the subject's profile ``q``:

* ``dom_match`` — share of the subject's domain mentions that are the record's most likely
  domain; NaN when that share is 0 or the subject has no profile, so "domains" is listed
  among a suggestion's sources only when the domains agree;
* ``dom_agree`` — Σ_d p_d·q_d, with ``q`` smoothed toward the overall domain distribution;
* ``dom_cos`` — cosine of ``p`` and the smoothed ``q``.

Confirmed records (`learn`) add their gold domains to the profiles at once. Saved without
pickle: the classifier's folder, the profile counts (npy) and ``domains.json`` (label set,
vocabulary size, overall distribution); a folder with another label set or vocabulary size
is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from tagalign.classify.base import Classifier, LabelSetMismatch, get_classifier
from tagalign.classify.data import Example
from tagalign.classify.profiles import domain_matrix, subject_domain_counts
from tagalign.errors import InputError
from tagalign.io import (
    load_csr,
    load_npy,
    read_json,
    save_csr_atomic,
    save_npy_atomic,
    write_json_atomic,
)
from tagalign.records import Record
from tagalign.suggest.fusion import PairFeatures
from tagalign.suggest.sources.base import (
    Batch,
    Candidates,
    FitContext,
    Source,
    register_source,
)
from tagalign.suggest.sources.domain_config import DomainSourceConfig
from tagalign.suggest.sources.memory import label_matrix
from tagalign.vocab import VocabularyMismatchError

TUNE_SAMPLE = 2000  # thresholds are not used here; tuning them on a sample keeps fit cheap


@register_source
class DomainSource(Source):
    name = "domains"
    features = ["dom_match", "dom_agree", "dom_cos"]
    config_class = DomainSourceConfig
    config: DomainSourceConfig

    def __init__(self, config: DomainSourceConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        labels = self.config.labels
        self.expected = sorted(labels) if labels else None
        self.classifier_: Any = None
        self.labels_: list[str] = []
        self.counts_: sp.csr_matrix | None = None  # (subjects × domains) gold-domain counts
        self.overall_: np.ndarray | None = None  # domain distribution of the training records
        self.profile_: sp.csr_matrix | None = None  # counts + borrowed rows (by notation)
        self.vocab_: Any = None
        self.notations_: sp.csr_matrix | None = None

    # -- learning --------------------------------------------------------------------------
    def fit(self, ctx: FitContext) -> None:
        records: Sequence[Record] = ctx.records
        tokens: Sequence[list[str] | None] = ctx.tokens or [None] * len(records)
        allowed = set(self.expected) if self.expected else None
        examples = [Example(r.id, r.text, [d for d in r.domains if allowed is None or d in allowed],
                            r.language, tok) for r, tok in zip(records, tokens, strict=True)]
        labelled = [ex for ex in examples if ex.labels]
        if not labelled:
            raise InputError("the domains source needs training records with 'domains' "
                             "(LinSearch codes); none of the training records has any")
        cfg = self.config
        rng = np.random.default_rng(cfg.seed)
        tune_on = [labelled[i] for i in np.sort(rng.permutation(len(labelled))[:TUNE_SAMPLE])]
        clf = get_classifier("linear", C=cfg.C, limit_train=cfg.limit_train, seed=cfg.seed)
        clf.fit(labelled, tune_on)
        clf.thresholds_["tuned_on"] = f"a seeded sample of {len(tune_on)} training records"
        if self.expected is not None and clf.label_set.labels != self.expected:
            missing = sorted(set(self.expected) - set(clf.label_set.labels))
            raise InputError(f"the training records carry no example of domains {missing}")
        self.classifier_, self.labels_ = clf, clf.label_set.labels
        D = domain_matrix(records, self.labels_)
        self.counts_ = subject_domain_counts(ctx.Y, D)
        freq = np.asarray(D.sum(axis=0)).ravel() + 1.0
        self.overall_ = (freq / freq.sum()).astype(np.float32)
        self.vocab_ = ctx.vocab
        self._refresh()

    def learn(self, batch: Batch, rows: np.ndarray) -> None:
        """Confirmed records' gold domains join the profiles of their subjects."""
        if self.counts_ is None or self.vocab_ is None:
            return
        recs = [r for r in batch.records if r.domains and r.subjects]
        if not recs:
            return
        delta = subject_domain_counts(label_matrix(recs, self.vocab_),
                                      domain_matrix(recs, self.labels_))
        self.counts_ = (self.counts_ + delta).tocsr()
        self._refresh()

    def bind(self, vocab: Any) -> None:
        """``vocab``, an update of the vocabulary trained with (every old position kept,
        new headings appended: `tagalign.vocab.changes.apply`): the counts gain an empty
        row per new heading, the notations are read again (a new or corrected heading's
        GND notations lend it the profile of the seen subjects sharing them) and the
        profiles are made anew. The classifier knows domains, not subjects: it stays."""
        self.vocab_, self.notations_ = vocab, None
        if self.counts_ is None:
            return
        rows, cols = self.counts_.shape
        if len(vocab) > rows:
            self.counts_ = sp.vstack([self.counts_, sp.csr_matrix(
                (len(vocab) - rows, cols), dtype=self.counts_.dtype)]).tocsr()
        self._refresh()

    def _notations(self) -> sp.csr_matrix | None:
        """(subjects × GND classification notations) 0/1, built once; None without any."""
        if self.notations_ is None:
            rows: list[int] = []
            codes: list[int] = []
            code_index: dict[str, int] = {}
            for pos, subj in enumerate(self.vocab_.subjects):
                for notation, _name in subj.classification:
                    rows.append(pos)
                    codes.append(code_index.setdefault(notation, len(code_index)))
            self.notations_ = sp.csr_matrix(
                (np.ones(len(rows), np.float32), (rows, codes)),
                shape=(len(self.vocab_), max(len(code_index), 1)))
        return self.notations_ if self.notations_.nnz else None

    def _refresh(self) -> None:
        """Profiles = gold counts, plus for subjects without any a borrowed profile: the mean
        domain shares of the seen subjects sharing a GND classification notation."""
        counts = self._trained(self.counts_)
        total = np.asarray(counts.sum(axis=1)).ravel()
        N = self._notations()
        if N is None:
            self.profile_ = counts
            return
        seen = sp.diags((total > 0).astype(np.float32))
        shares = sp.diags(1.0 / np.maximum(total, 1e-9)) @ counts
        by_code = (N.T @ (seen @ shares)).tocsr()  # per notation: its seen subjects' shares
        unseen = sp.diags((total == 0).astype(np.float32))
        borrowed = (unseen @ N @ by_code).tocsr()
        mass = np.asarray(borrowed.sum(axis=1)).ravel()
        borrowed = sp.diags(np.where(mass > 0, 1.0 / np.maximum(mass, 1e-9), 0.0)) @ borrowed
        self.profile_ = (counts + borrowed).tocsr().astype(np.float32)

    # -- features --------------------------------------------------------------------------
    def record_domains(self, batch: Batch) -> np.ndarray:
        """(records × domains) predicted probabilities, from the batch's tokens."""

        tokens: Sequence[list[str] | None] = batch.tokens or [None] * len(batch)
        examples = [Example(r.id, r.text, [], lang, tok) for r, lang, tok in
                    zip(batch.records, batch.languages, tokens, strict=True)]
        return self.classifier_.predict_proba(examples)

    def candidates(self, batch: Batch) -> Candidates:
        probs = self.record_domains(batch)
        profile, overall = self._trained(self.profile_), self._trained(self.overall_)
        alpha = self.config.smoothing
        top = probs.argmax(1) if len(probs) else np.zeros(0, np.int64)
        pnorm = np.linalg.norm(probs, axis=1)

        def fill(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
            out = np.full((len(rows), len(self.features)), np.nan, np.float32)
            if len(rows) == 0:
                return out
            raw = profile[cols].toarray()
            total = raw.sum(1)
            seen = total > 0
            share = raw[np.arange(len(rows)), top[rows]] / np.maximum(total, 1e-9)
            q = (raw + alpha * overall) / (total + alpha)[:, None]
            p = probs[rows]
            agree = (p * q).sum(1)
            cos = agree / np.maximum(pnorm[rows] * np.linalg.norm(q, axis=1), 1e-9)
            out[:, 0] = np.where(seen & (share > 0), share, np.nan)
            out[:, 1] = np.where(seen, agree, np.nan)
            out[:, 2] = np.where(seen, cos, np.nan)
            return out

        return PairFeatures.deferred(list(self.features), fill)

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: Path) -> None:
        self.classifier_.save(path / "classifier")
        counts = self._trained(self.counts_)
        save_csr_atomic(path, "counts", counts)
        save_npy_atomic(path / "overall.npy", self._trained(self.overall_))
        write_json_atomic(path / "domains.json", {"labels": self.labels_,
                                                  "shape": list(counts.shape),
                                                  "params": self.config.values()})

    def load_state(self, path: Path, ctx: FitContext) -> None:
        meta = read_json(path / "domains.json")
        labels = list(meta["labels"])
        if self.expected is not None and sorted(labels) != self.expected:
            raise LabelSetMismatch(
                f"{path}: domain source trained on another label set ({len(labels)} domains: "
                f"missing {sorted(set(self.expected) - set(labels))[:5]}, unexpected "
                f"{sorted(set(labels) - set(self.expected))[:5]})")
        shape = tuple(meta["shape"])
        if shape != (len(ctx.vocab), len(labels)):
            raise VocabularyMismatchError(
                f"{path}: domain profiles are {shape[0]} subjects × {shape[1]} domains; this "
                f"project has {len(ctx.vocab)} subjects and {len(labels)} domains (another "
                "vocabulary?)")
        self.classifier_ = Classifier.load(path / "classifier", labels=labels)
        self.labels_ = labels
        self.counts_ = load_csr(path, "counts", shape)
        self.overall_ = load_npy(path / "overall.npy")
        self.vocab_ = ctx.vocab
        self._refresh()
