"""A domain model beside a subject project: a record's domains from its text and the
project's suggestions for it (`tagalign.classify.stack`, recipe ``subjects-stack``).

The classifier lives below the projects and takes suggestions as plain input; this module
runs the project and feeds them in:

* training (`tagalign classify train --subjects-project`): the project suggests for the
  ``--dev`` records (`suggest_into`), never for ``--train`` (the profiles count train's
  gold subjects); a project that keeps the ids it learned from (the hybrid's record
  memory) refuses a dev record among them (`check_held_out`), since a stacker learned on
  suggestions for records the project saw would trust them too much. The training
  records the project itself held out (the hybrid's split B) join the stacker's records
  with the suggestions the project kept for them (`held_out_examples`);
* suggesting (`tagalign suggest --domains`, ``/tagalign/v1``, the page): `Tagger.tag`
  asks the recipe for the top ``top_k`` the stacker was trained on in the same pass as the
  returned subjects (however small ``--limit`` is) and hands them to `DomainModel.predict`.

A domain model refuses a project of another vocabulary (`VocabularyMismatchError`, the
message of every artifact) and, with ``labels``, another label set (`LabelSetMismatch`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tagalign.classify import Classifier, Example
from tagalign.classify.stack import SubjectStackClassifier
from tagalign.errors import ConflictError, InputError
from tagalign.records import EMPTY_WARNING, Record, check_record
from tagalign.suggest import Neighbours, Suggestion, SuggestRequest
from tagalign.vocab import Vocabulary

if TYPE_CHECKING:
    from tagalign.project.folder import Project


class SeenRecordsError(ConflictError):
    """Dev records the subject project learned from: a stacker must not learn on them."""


class DomainModel:
    """A loaded ``subjects-stack`` classifier bound to a subject project's vocabulary."""

    def __init__(self, classifier: SubjectStackClassifier, path: Path):
        self.classifier, self.path = classifier, Path(path)

    @classmethod
    def load(cls, folder: Path | str, vocab: Vocabulary,
             labels: Sequence[str] | None = None) -> DomainModel:
        folder = Path(folder)
        clf = Classifier.load(folder, labels=labels)
        if not isinstance(clf, SubjectStackClassifier):
            raise InputError(f"{folder}: a {clf.name!r} classifier reads text alone; a domain "
                             "model beside subjects is trained with `tagalign classify train "
                             "--subjects-project PROJECT` (recipe subjects-stack)")
        clf.bind(vocab, f"domain model {folder}")
        return cls(clf, folder)

    @property
    def depth(self) -> int:
        """Suggestions per record the stacker reads (its ``top_k``)."""
        return self.classifier.config.top_k

    @property
    def subjects_project(self) -> str | None:
        """Where the subject project was when this model was trained."""
        return self.classifier.subjects_project_

    def bind(self, vocab: Vocabulary) -> None:
        """Read another project's suggestions (a reloaded one): same vocabulary or refused."""
        self.classifier.bind(vocab, f"domain model {self.path}")

    def predict(self, records: Sequence[Record], suggested: Sequence[Sequence[Suggestion]],
                neighbours: Sequence[Neighbours] | None = None
                ) -> list[list[tuple[str, float]]]:
        """Each record's domains (label, score), best first, at the tuned thresholds, from
        the project's suggestions and neighbour records of the same pass."""
        found = neighbours if neighbours is not None else [{}] * len(records)
        return self.classifier.predict(
            [Example(r.id, r.text, [], r.language,
                     suggested=[(s.id, float(s.score)) for s in row], neighbours=dict(nb))
             for r, row, nb in zip(records, suggested, found, strict=True)])


def attach(project: Project, folder: Path | str) -> Project:
    """``project`` served with the domain model at ``folder`` beside its subjects (a new
    `Project`, its other serving settings kept; the model checked against its vocabulary:
    `ServingSettingError` with key ``domains``)."""
    return project.with_serving(replace(project.serving, domain_model=Path(folder)))


def check_held_out(project: Project, examples: Sequence[Example]) -> None:
    """Refuse examples the project learned from, when it keeps their ids (the hybrid
    does); recipes that keep none cannot be checked: the caller's promise (documented)."""
    seen = project.trained_recipe().seen_record_ids()
    if seen is None:
        return
    overlap = sorted(ex.id for ex in examples if ex.id in seen)
    if overlap:
        raise SeenRecordsError(
            f"{len(overlap)} of the {len(examples)} dev records were training records of the "
            f"subject project {project.path} (e.g. {overlap[:3]}): the stacker must learn on "
            "suggestions for records the project never saw; give dev records it did not "
            "train on")


def held_out_examples(project: Project, train: Sequence[Example], depth: int
                      ) -> list[Example]:
    """The ``train`` examples the subject project held out while it trained, each with the
    suggestions (``depth`` deep) and neighbour records the project keeps for it
    (`tagalign.suggest.held_out`): more records a stacker may learn from. None of them when
    the project keeps no such evidence, or keeps it shallower than ``depth`` (a stacker
    reading ``depth`` suggestions would learn on shorter lists than it is served)."""
    evidence = project.trained_recipe().held_out_evidence()
    if evidence is None or evidence.depth < depth:
        return []
    by_id = {ex.id: ex for ex in train}
    return [replace(by_id[rid], suggested=list(sug[:depth]), neighbours=dict(nbrs))
            for rid, sug, nbrs in zip(evidence.ids, evidence.suggested, evidence.neighbours,
                                      strict=True) if rid in by_id]


def suggest_into(project: Project, examples: Sequence[Example], depth: int,
                 records: Mapping[str, Record] | None = None, batch_size: int = 512,
                 on_batch=None) -> None:
    """Fill each example's ``suggested`` with the project's top ``depth`` and its
    ``neighbours`` with the project's neighbour records of the same pass (the record of
    the same id from ``records`` when given: its title counts apart from its abstract)."""
    recipe = project.trained_recipe()
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        recs = [check_record((records or {}).get(ex.id) or
                             Record(id=ex.id, title=ex.text, language=ex.language))
                for ex in chunk]
        todo = [i for i, (_, warning) in enumerate(recs) if warning != EMPTY_WARNING]
        # no cut and no quality estimate: the plain lists, with their neighbour records
        rows = recipe.suggest([recs[i][0] for i in todo], SuggestRequest.ranking(
            depth, neighbours=True)) if todo else []
        for ex in chunk:
            ex.suggested, ex.neighbours = [], {}
        for i, tagged in zip(todo, rows, strict=True):
            chunk[i].suggested = [(s.id, float(s.score)) for s in tagged.suggestions]
            chunk[i].neighbours = tagged.neighbours or {}
        if on_batch is not None:
            on_batch(start + len(chunk), len(examples))
