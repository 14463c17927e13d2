"""Train a project (`tagalign train`): its recipe fitted on records and on the records
librarians confirmed through `tagalign serve`, saved atomically into ``model/``, then
scored on dev records whose scores `tagalign serve` and ``GET /v1/projects/{id}`` show."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tagalign.evaluate import DEFAULT_KS, evaluate
from tagalign.feedback import FeedbackStore, sqlite_file
from tagalign.project import Project, Tagger, feedback_location
from tagalign.recipes import Recipe
from tagalign.records import Record
from tagalign.suggest import SuggestRequest
from tagalign.vocab import Vocabulary

logger = logging.getLogger(__name__)

#: suggestions per dev record: as deep as the deepest cut the dev scores report (f1@20 …)
DEV_LIMIT = max(DEFAULT_KS)


@dataclass(frozen=True)
class ProjectTraining:
    """What `train_project` did."""

    project: Project
    #: the trained recipe (also ``project.recipe``, saved in ``project.path / "model"``)
    recipe: Recipe
    #: records trained on, the confirmed ones included
    records: int
    #: of them, records librarians confirmed (`confirmed_records`)
    confirmed: int
    #: seconds the recipe took to learn and save itself
    seconds: float
    #: `tagalign.evaluate.evaluate` of the dev records (``overall`` is saved with the
    #: project); None without dev records
    dev_scores: dict[str, Any] | None
    #: training records whose gold ids of redirected headings were mapped to their targets,
    #: and gold ids dropped as deleted or split (`follow_vocabulary`; 0 without updates)
    gold_mapped: int = 0
    gold_dropped: int = 0


def confirmed_records(project: Project, feedback_db: str | None = None) -> list[Record]:
    """Records librarians confirmed through `tagalign serve`, found where serve keeps them
    (`tagalign.project.feedback_location`: ``feedback_db``, else the projects file's, else
    ``PROJECT/feedback.sqlite``); none if no store exists."""
    url, key = feedback_location(project.path, project.feedback_db, feedback_db)
    db = sqlite_file(url)
    if db is not None and not db.exists():
        return []
    return list(FeedbackStore(url).confirmed_records(key))


def score_dev(project: Project, dev: Sequence[Record]) -> dict[str, Any]:
    """The trained ``project`` on ``dev``: `tagalign.evaluate.evaluate` of its top
    `DEV_LIMIT` suggestions (at the project's threshold)."""
    preds = [t.suggestions for t in
             Tagger(project).tag(dev, SuggestRequest(limit=DEV_LIMIT, quality=False))]
    return evaluate(dev, {r.id: [s.id for s in row]
                          for r, row in zip(dev, preds, strict=True)})


def follow_vocabulary(records: Sequence[Record], vocab: Vocabulary
                      ) -> tuple[list[Record], int, int]:
    """``records`` with the gold ids of redirected headings read as their targets and those
    of deleted or split ones dropped (a vocabulary updated by change files:
    `Vocabulary.retired`), so a merged heading is learned once, under its target: (the
    records, how many had an id mapped, how many ids were dropped)."""
    if not vocab.retired:
        return list(records), 0, 0
    out, mapped, dropped = [], 0, 0
    for r in records:
        if not any(sid in vocab.retired for sid in r.subjects):
            out.append(r)
            continue
        gold: list[str] = []
        for sid in r.subjects:
            now = vocab.successor(sid)
            if now is None:
                dropped += 1
            elif now not in gold:
                gold.append(now)
        mapped += any(vocab.successor(sid) not in (sid, None) for sid in r.subjects)
        out.append(replace(r, subjects=gold))
    return out, mapped, dropped


def train_project(project: Project, records: Sequence[Record],
                  dev: Sequence[Record] | None = None, *, resume: bool = True,
                  feedback: bool = True, feedback_db: str | None = None) -> ProjectTraining:
    """Train ``project``'s recipe (`Project.train`, with its ``runtime``) on ``records``
    and, with ``feedback``, on the records librarians confirmed (`confirmed_records`), then
    score it on ``dev`` (`score_dev`) and save the overall scores with the project.

    ``resume``: reuse finished phases of an interrupted run (kept in ``PROJECT/work``)."""
    records = list(records)
    confirmed = confirmed_records(project, feedback_db) if feedback else []
    if confirmed:
        logger.info("+ %d records confirmed by librarians", len(confirmed))
        records += confirmed
    records, mapped, dropped = follow_vocabulary(records, project.vocab)
    if mapped or dropped:
        logger.info("gold subjects of %d records mapped to the targets of redirected headings, "
                    "%d gold ids of deleted or split headings dropped", mapped, dropped)
    if dev:
        dev = follow_vocabulary(dev, project.vocab)[0]
    t0 = time.perf_counter()
    recipe = project.train(records, resume=resume)
    seconds = time.perf_counter() - t0
    scores = None
    if dev:
        scores = score_dev(project, dev)
        project.set_scores(scores["overall"])
    return ProjectTraining(project, recipe, len(records), len(confirmed), seconds, scores,
                           mapped, dropped)
