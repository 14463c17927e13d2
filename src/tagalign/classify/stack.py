"""`subjects-stack`: a record's domains from its text and a subject project's suggestions.

Three parts, each learned where it cannot have seen what it is judged on:

1. a text classifier (``text_recipe``, default `linear-ngrams`) trained on ``--train``;
2. subject → domain profiles (`tagalign.classify.profiles`) counted on the ``--train``
   records' gold subjects × gold domains (their suggestions are never used);
3. a stacker (`tagalign.classify.stacker`) over per-(record, domain) features — the text
   probability, the score-weighted subject evidence Σ score·P(d|s) / Σ score over the top
   ``top_k`` suggestions, the top subject's P(d|s), the largest P(d|s), the ranks of the
   domain in both, the evidence's mass — learned on ``--dev``, whose records neither the
   text model nor the subject project saw. Cross-fitted inside dev (``folds``, seeded): each
   dev record's tuning score comes from the stacker of the other folds; the thresholds
   (global and per class) are tuned on those out-of-fold scores as every recipe tunes its
   own, then the stacker is learned again on all of dev. Which of the two is served
   (`choose_decision`) is decided on dev too, by nested cross-validation over the folds.

   With ``held_out`` (default) and a subject project that keeps held-out evidence
   (`tagalign.suggest.held_out`: the hybrid's split-B records, suggested by sources and
   rankers that never saw them), every stacker also learns from those training records
   (``held_out_examples``). Their text probabilities must be honest too, so the text model
   then learns from the other training records only, and their subject profiles leave
   their own counts out (`SubjectEvidence.shares_of`). They are never scored: thresholds
   and the dev figures stay out-of-fold dev scores.

   Without ``--dev`` the held-out training records take the dev records' place: the
   stacker is cross-fitted on them alone and the thresholds are tuned on their out-of-fold
   scores (``tuned_on`` ``held_out``), so a library with no labelled dev set of its own
   trains the stack from its training file. Measured as good as 4,000 dev records
   (docs/classify.md). A project without held-out evidence still needs ``--dev``.

The suggestions are plain input (`Example.suggested`: (subject id, score) best first), so
this layer never runs a project; `tagalign.project.domains` feeds them in. The vocabulary
the profiles index is bound with `bind` (a model refuses another vocabulary: its
fingerprint is saved with it). Saved without pickle: the text model's folder, the profile
counts (npy), the stacker (LightGBM text format or npy) and ``subjects.json``.

The default stacker is ``lightgbm``, pooled over the domains with the domain as a
categorical feature: measured against one logistic regression per domain on the full data
(`benchmarks/domains/domains_stack.py`, docs/classify.md) it was the better of the two, and it lets
the rare domains share what the frequent ones show about trusting text vs subjects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from tagalign.classify.base import (
    Classifier,
    get_classifier,
    register_classifier,
)
from tagalign.classify.config import SubjectStackConfig
from tagalign.classify.data import Example
from tagalign.classify.neighbours import Found, NeighbourEvidence
from tagalign.classify.profiles import Own, SubjectEvidence
from tagalign.classify.stacker import DomainStacker, cross_fit
from tagalign.errors import InputError, ModelFormatError, UsageError
from tagalign.io import load_csr, read_json, save_csr_atomic, write_json_atomic
from tagalign.runtime import ProgressCallback
from tagalign.vocab import Vocabulary, VocabularyMismatchError

TEXT_DIR, STACKER_DIR, META = "text", "stacker", "subjects.json"
NEIGHBOURS = "neighbours.json"


@register_classifier
class SubjectStackClassifier(Classifier):
    name = "subjects-stack"
    config_class = SubjectStackConfig
    config: SubjectStackConfig
    #: threads are the runtime's (`Classifier.runtime`), not a model parameter
    retired = frozenset({"threads"})

    def __init__(self, **params: Any):
        super().__init__(**params)
        #: the subject project's vocabulary (`bind`); runtime state, saved as its fingerprint
        self.vocab: Vocabulary | None = None
        #: what the bound vocabulary must be: {"fingerprint", "size"} (saved, checked)
        self.vocabulary_: dict[str, Any] | None = None
        #: the text classifier (`fit` trains one, or takes ``text_model``)
        self.text_: Classifier | None = None
        self.evidence_: SubjectEvidence | None = None
        #: the neighbour records' domains (`tagalign.classify.neighbours`); None: not read
        self.neighbours_: NeighbourEvidence | None = None
        #: the training records' ids and gold domains, until `fit_stacker` knows which
        #: neighbour sources the subject project has
        self.train_domains_: tuple[list[str], sp.csr_matrix] | None = None
        self.stacker_: DomainStacker | None = None
        #: each dev record's fold in the last `fit` (out-of-fold tuning scores, see module)
        self.tuning_folds_: np.ndarray | None = None
        #: the dev records' out-of-fold scores of the last `fit` (the honest dev figures)
        #: and their gold domains
        self.tuning_scores_: np.ndarray | None = None
        self.tuning_gold_: np.ndarray | None = None
        #: no --dev: the stacker learned and was scored on the held-out training records
        self.tuned_on_held_out_ = False
        #: where the subject project was at training (the default of predict and suggest)
        self.subjects_project_: str | None = None
        #: the ``held_out_examples`` of the last `fit` (read with ``held_out`` on)
        self._held_out_examples: list[Example] = []
        #: how many of them the stacker learned from (saved)
        self.held_out_records_ = 0
        self.counts_: Any = None  # the profile counts of a loaded model, until `bind`

    # -- the vocabulary -------------------------------------------------------------------
    def bind(self, vocab: Vocabulary, what: str = "this domain model") -> None:
        """Read suggestions of ``vocab``'s subjects; a trained model refuses a vocabulary
        other than its own (`VocabularyMismatchError`, the fingerprint check of every
        artifact)."""
        if self.vocabulary_ is not None:
            vocab.check(self.vocabulary_["fingerprint"], self.vocabulary_["size"], what)
        counts = self.evidence_.counts if self.evidence_ is not None else self.counts_
        if counts is not None:
            if counts.shape[0] != len(vocab):  # same fingerprint, other size: a bad folder
                raise VocabularyMismatchError(f"{what}: profiles of {counts.shape[0]} "
                                              f"subjects, vocabulary of {len(vocab)}")
            self.evidence_ = SubjectEvidence(vocab, counts, self.config.top_k)
        self.vocab = vocab

    def _vocab(self) -> Vocabulary:
        if self.vocab is None:
            raise UsageError("recipe 'subjects-stack' reads subject suggestions: bind the "
                             "subject project's vocabulary first (--subjects-project)")
        return self.vocab

    # -- learning -------------------------------------------------------------------------
    def fit(self, train: Sequence[Example], dev: Sequence[Example] | None = None,
            labels: Sequence[str] | None = None, *,
            progress: ProgressCallback | None = None,
            held_out_examples: Sequence[Example] | None = None,
            subjects_project: Path | str | None = None,
            text_model: Classifier | None = None) -> Classifier:
        """`Classifier.fit`, and all of this recipe's own state from its arguments (bind
        the subject project's vocabulary first):

        ``held_out_examples``: training records the subject project held out, with its
        suggestions and neighbour records for them
        (`tagalign.project.domains.held_out_examples`); with ``held_out`` on the stacker
        learns from them and the text model does not. ``subjects_project``: where that
        project is (saved: the default of ``classify predict`` and ``suggest
        --domains``). ``text_model``: a text classifier already trained on ``train``
        (never on the held-out records) instead of a new one."""
        self._held_out_examples = list(held_out_examples or ())
        self.subjects_project_ = (None if subjects_project is None
                                  else str(Path(subjects_project).resolve()))
        self.text_ = text_model
        super().fit(train, dev, labels, progress=progress)
        self.choose_decision(self._trained(self.tuning_scores_), self._trained(self.tuning_gold_))
        return self

    def _tuning_records(self, train: list[Example], dev: Sequence[Example] | None
                        ) -> tuple[list[Example], list[Example], str]:
        """The stacker's scored records: the labelled dev records; without them, the
        training records the subject project held out (``held_out``): neither the text
        model nor the project's sources learned from them, so they are as honest as dev
        records. Never a slice of train the project saw (the base recipes' holdout)."""
        tune_on = [ex for ex in dev or () if ex.labels]
        self.tuned_on_held_out_ = not tune_on
        if tune_on:
            return train, tune_on, "dev"
        held = self._held_out()
        if len(held) < self.config.folds:  # before any training: a usage error
            raise UsageError(
                "recipe 'subjects-stack' learns its stacker on records neither the text "
                "model nor the subject project saw: give --dev, or a subject project that "
                "keeps held-out evidence (a hybrid trained with held_out_evidence=true) and "
                "held_out=true"
                + (f" (it holds {len(held)} of the training records)" if held else ""))
        return train, held, "held_out"

    def choose_decision(self, oof: np.ndarray, y: np.ndarray) -> str:
        """Serve the global or the per-class thresholds, chosen by nested cross-validation
        over the stacker's folds on the dev records alone (`choose_decision`): the stacker
        calibrates each domain itself (a categorical feature, or one regression each), so
        29 per-class thresholds on top of it tend to fit the 4,000 tuning records
        (measured: docs/classify.md)."""
        from tagalign.classify.thresholds import choose_decision

        chosen, means = choose_decision(oof, y, self._trained(self.tuning_folds_))
        self.thresholds_["default"] = chosen
        self.thresholds_["nested_micro_f1"] = {k: round(v, 4) for k, v in means.items()}
        return chosen

    def _fit(self, train: Sequence[Example], y: np.ndarray) -> None:
        vocab = self._vocab()
        self.vocabulary_ = {"fingerprint": vocab.fingerprint, "size": len(vocab)}
        held = {ex.id for ex in self._held_out()}
        if self.text_ is None:
            text = get_classifier(self.config.text_recipe, self.runtime,
                                  **self.config.text_params)
            text.progress = self.progress
            text.labels_ = self.labels_
            keep = [i for i, ex in enumerate(train) if ex.id not in held]
            text._fit([train[i] for i in keep], y[keep])  # never the held-out records
            self.text_ = text
        elif self.text_.labels_ != self.labels_:
            raise InputError("the given text classifier was trained on another label set")
        with_subjects = [i for i, ex in enumerate(train) if ex.subjects]
        if not with_subjects:
            raise InputError("recipe 'subjects-stack' counts subject → domain profiles on the "
                             "training records' gold subjects; none of them has any")
        self._tick("subject profiles", 0, 1)
        self.evidence_ = SubjectEvidence.fit(vocab,
                                             [train[i].subjects or [] for i in with_subjects],
                                             y[with_subjects], self.config.top_k)
        self._tick("subject profiles", 1, 1)
        self.train_domains_ = ([ex.id for ex in train], sp.csr_matrix(y, dtype=np.float32))

    def _tuning_scores(self, tune_on: Sequence[Example]) -> np.ndarray:
        """Out-of-fold stacked scores of the dev records (see the module docstring); the
        text model's own thresholds are tuned on its dev probabilities on the way."""
        from tagalign.classify.thresholds import tune

        text = self._trained(self.text_)
        text_probs = text.predict_proba(tune_on)
        y = self.label_set.matrix(tune_on)
        where = "held_out" if self.tuned_on_held_out_ else "dev"
        if not text.thresholds_:
            found = tune(text_probs, y)
            text.thresholds_ = {**found, "tuned_on": where,
                                      "tuned_on_records": len(tune_on)}
        extra = own = None
        if self.tuned_on_held_out_:  # they are training records: their own counts left out
            own = [ex.subjects or [] for ex in tune_on]
        elif held := self._held_out():
            extra = HeldOutRows(text.predict_proba(held), _suggested(held),
                                self.label_set.matrix(held),
                                [ex.neighbours or {} for ex in held],
                                [ex.subjects or [] for ex in held])
        return self.fit_stacker(text_probs, _suggested(tune_on), y,
                                [ex.neighbours or {} for ex in tune_on], extra, own)

    def _held_out(self) -> list[Example]:
        """The held-out training records the stacker learns from (``held_out`` on)."""
        if not self.config.held_out:
            return []
        return [ex for ex in self._held_out_examples if ex.labels]

    def fit_stacker(self, text_probs: np.ndarray, suggested: Sequence[Any], y: np.ndarray,
                    neighbours: Sequence[Found] | None = None,
                    held_out: HeldOutRows | None = None,
                    own_subjects: Sequence[list[str]] | None = None) -> np.ndarray:
        """Cross-fit the stacker on held-out records (text probabilities, suggestions and
        neighbour records of models that never saw them); returns the out-of-fold scores
        and keeps the stacker learned on all of them. The neighbour sources read are those
        the subject project gave (none: the features are left out). ``held_out``: training
        records the subject project held out, learned from by every stacker, never
        scored (see the module). ``own_subjects``: the scored records are themselves
        training records (no dev): their gold subjects, left out of their profiles."""
        c = self.config
        self.neighbours_ = None
        sources = sorted({src for found in neighbours or () for src in found})
        if c.neighbours and neighbours is not None and sources:
            if self.train_domains_ is None:
                raise UsageError("recipe 'subjects-stack': fit the text model and profiles "
                                 "on --train before the stacker")
            ids, domains = self.train_domains_
            self.neighbours_ = NeighbourEvidence(ids, domains, sources, c.neighbour_k,
                                                 c.neighbour_power)
            if self.neighbours_.coverage(neighbours) == 0.0:
                raise InputError("recipe 'subjects-stack': none of the subject project's "
                                 "neighbour records is a --train record; train the domain "
                                 "model on the records the project learned from, or set "
                                 "--param neighbours=false")
        own = None if own_subjects is None else self._trained(self.evidence_).own(own_subjects, y)
        X = self._features(text_probs, suggested, neighbours, own)
        extra = None
        self.held_out_records_ = 0 if own_subjects is None else len(y)
        if held_out is not None and len(held_out.y):
            extra = (self._features(held_out.text_probs, held_out.suggested,
                                    held_out.neighbours,
                                    self._trained(self.evidence_).own(held_out.subjects,
                                                                      held_out.y)),
                     held_out.y)
            self.held_out_records_ = len(held_out.y)
        make = DomainStacker(c.stacker, rounds=c.rounds, learning_rate=c.learning_rate,
                             leaves=c.leaves, C=c.C, seed=c.seed,
                             threads=self.runtime.threads, bag=c.bag)
        oof, self.tuning_folds_, self.stacker_ = cross_fit(
            make, X, y, c.folds, c.seed, extra,
            tick=lambda done, total: self._tick("stacker", done, total))
        self.tuning_scores_, self.tuning_gold_ = oof, y
        return oof

    # -- scoring --------------------------------------------------------------------------
    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        if not examples:
            return np.zeros((0, len(self.label_set)), np.float32)
        return self.stack_proba(self._trained(self.text_).predict_proba(examples),
                                _suggested(examples), [ex.neighbours or {} for ex in examples])

    def stack_proba(self, text_probs: np.ndarray, suggested: Sequence[Any],
                    neighbours: Sequence[Found] | None = None) -> np.ndarray:
        """The stacked scores from the text probabilities, the suggestions and (when the
        stacker learned on them) the neighbour records."""
        self._vocab()
        stacker = self._trained(self.stacker_)
        return stacker.predict_proba(self._features(text_probs, suggested, neighbours))

    def _features(self, text_probs: np.ndarray, suggested: Sequence[Any],
                  neighbours: Sequence[Found] | None, own: Own | None = None) -> np.ndarray:
        X = self._trained(self.evidence_).features(text_probs, suggested, own)
        if self.neighbours_ is None:
            return X
        if neighbours is None or len(neighbours) != len(suggested) or any(
                src not in found for found in neighbours for src in self.neighbours_.sources):
            raise UsageError(f"recipe 'subjects-stack' learned on the neighbour records of "
                             f"the subject project's sources {self.neighbours_.sources}; "
                             "give each record's neighbours from such a project "
                             "(--subjects-project)")
        return np.concatenate([X, self.neighbours_.features(neighbours)], axis=2)

    # -- persistence ----------------------------------------------------------------------
    def _save_state(self, folder: Path) -> None:
        self._trained(self.text_).save(folder / TEXT_DIR)
        self._trained(self.stacker_).save(folder / STACKER_DIR)
        evidence = self._trained(self.evidence_)
        save_csr_atomic(folder, "profiles", evidence.counts)
        write_json_atomic(folder / META, {
            "vocabulary": self.vocabulary_, "shape": list(evidence.counts.shape),
            "subjects_project": self.subjects_project_,
            "held_out_records": self.held_out_records_, **evidence.describe()})
        if self.neighbours_ is not None:
            nb = self.neighbours_
            save_csr_atomic(folder, "neighbour-domains", nb.domains)
            write_json_atomic(folder / NEIGHBOURS, {**nb.describe(), "ids": nb.ids})

    def _load_state(self, folder: Path) -> None:
        meta = read_json(folder / META)
        self.vocabulary_ = meta["vocabulary"]
        self.subjects_project_ = meta.get("subjects_project")
        self.held_out_records_ = int(meta.get("held_out_records", 0))
        shape = tuple(meta["shape"])
        if shape[1] != len(self.label_set):
            raise ModelFormatError(f"{folder}: profiles of {shape[1]} domains for "
                                   f"{len(self.label_set)} labels")
        self.text_ = Classifier.load(folder / TEXT_DIR, labels=self.label_set.labels,
                                     runtime=self.runtime)
        self.stacker_ = DomainStacker.load(folder / STACKER_DIR, threads=self.runtime.threads)
        self.counts_ = load_csr(folder, "profiles", shape)
        self.neighbours_ = None
        if (folder / NEIGHBOURS).exists():  # absent: a stacker that read no neighbours
            nb = read_json(folder / NEIGHBOURS)
            if nb["domains"] != len(self.label_set):
                raise ModelFormatError(f"{folder}: neighbour domains of {nb['domains']} "
                                       f"labels for {len(self.label_set)} labels")
            domains = load_csr(folder, "neighbour-domains", (len(nb["ids"]), len(self.label_set)))
            self.neighbours_ = NeighbourEvidence(nb["ids"], domains, nb["sources"], nb["k"],
                                                 nb["power"])


@dataclass
class HeldOutRows:
    """What the stacker reads of the held-out training records: the text model's
    probabilities, the subject project's suggestions and neighbour records, gold domains
    (records × labels) and gold subject ids (their own profile counts, left out)."""

    text_probs: np.ndarray
    suggested: list[list[tuple[str, float]]]
    y: np.ndarray
    neighbours: list[Found]
    subjects: list[list[str]]


def _suggested(examples: Sequence[Example]) -> list[list[tuple[str, float]]]:
    missing = sum(ex.suggested is None for ex in examples)
    if missing:
        raise UsageError(f"recipe 'subjects-stack': {missing} of {len(examples)} records "
                         "carry no subject suggestions (run them through the subject "
                         "project first: --subjects-project)")
    return [list(ex.suggested or ()) for ex in examples]  # none is None (refused above)
