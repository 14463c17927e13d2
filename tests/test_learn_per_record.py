"""Online learning per record id: the latest decision on a record replaces the earlier
ones in the neighbour memory (issue: every accept/reject click appended the record)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tagalign.project import Project
from tagalign.records import Record
from tagalign.suggest import SuggestRequest
from tiny_models import KNN_LEXICAL_HYBRID, tiny_records, tiny_vocab

EPOS, PILZE, HOLZ = "4015065-3", "4046076-9", "4025741-1"


@pytest.fixture()
def project(tmp_path):
    proj = Project.create(tmp_path / "p", tiny_vocab(), "hybrid", KNN_LEXICAL_HYBRID)
    proj.train(tiny_records(120))
    return proj


def _voters(project: Project, record: Record) -> dict[str, list[str]]:
    """Subject id → ids of the neighbours that voted for it, for ``record``'s own text."""
    answer, = project.recipe.suggest([record], SuggestRequest(limit=8, quality=False))
    return {s.id: [n["id"] for n in s.reasons.get("neighbours", [])] for s in answer.suggestions}


def test_six_decisions_on_one_record_keep_one_row_and_only_the_latest_votes(project):
    memory = project.recipe.pipeline.memory
    before = len(memory)
    rec = Record(id="learned-1", title="Pilze im Holz", abstract="fungi wood rot timber decay",
                 language="en")
    for subjects in ([PILZE], [PILZE, HOLZ], [HOLZ], [PILZE, HOLZ, EPOS], [EPOS],
                     [PILZE, HOLZ]):
        assert project.learn([replace(rec, subjects=subjects)])
    assert len(memory) == before + 1
    row = memory.row_of("learned-1")
    assert sorted(project.vocab.subjects[i].id for i in memory.Y[row].indices) == \
        sorted([PILZE, HOLZ])
    voters = _voters(project, rec)
    assert "learned-1" in voters.get(PILZE, [])
    assert all("learned-1" not in ids for sid, ids in voters.items() if sid == EPOS)
    # all subjects taken back: the record votes for nothing, and still holds one row
    project.learn([replace(rec, subjects=[])])
    assert len(memory) == before + 1 and memory.Y[row].nnz == 0
    assert all("learned-1" not in ids for ids in _voters(project, rec).values())


def test_a_record_learned_again_with_another_text_stops_voting_with_the_old_one(project):
    memory = project.recipe.pipeline.memory
    old = Record(id="learned-2", title="Epos", abstract="epic hero poem saga verse",
                 language="en", subjects=[EPOS])
    project.learn([old])
    new = replace(old, title="Holzschutz", abstract="timber wood protection coating",
                  subjects=[HOLZ])
    project.learn([new])
    assert memory.ids.count("learned-2") == 2  # the old row's vector cannot change in place
    assert "learned-2" not in _voters(project, replace(old, subjects=[])).get(EPOS, [])
    assert "learned-2" in _voters(project, replace(new, subjects=[])).get(HOLZ, [])
