"""Learn requests naming headings retired since `tagalign vocab update`, on both APIs of a
real server over the tiny updated hybrid and its SQLite store: a redirected heading's id
is stored and learned as its target's (tagalign's answer says so in ``redirected``), a
deleted or split one's is refused as an unknown id is (422 on tagalign's API, nothing
stored; ignored on Annif's, as Annif ignores unknown subjects); every other answer is the
one it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from marc_authority import write_xml
from serving import LiveServer
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings
from tagalign.serve.app import create_app
from tagalign.shipping.vocab_update import update_vocabulary
from test_vocab_update import DENKMAL, HOLZSCHUTZ, PILZE, ZUKUNFT, week

EPOS, UNKNOWN = "4015065-3", "4999999-9"
T = 30


@pytest.fixture
def served(tiny_hybrid_copy: Path, tmp_path: Path) -> Iterator[tuple[str, Project,
                                                                      FeedbackStore]]:
    """The tiny hybrid after one week's changes, learning allowed, served for real."""
    update_vocabulary(tiny_hybrid_copy, [write_xml(tmp_path / "week_20240702.mrc.xml",
                                                   week())])
    project = Project.load(tiny_hybrid_copy, serving=ServingSettings(allow_learn=True))
    store = FeedbackStore.for_project(tiny_hybrid_copy)
    with LiveServer(create_app({"tiny": project}, store)) as srv:
        yield srv.url, project, store


def learn(url: str, *records: dict) -> httpx.Response:
    return httpx.post(f"{url}/tagalign/v1/projects/tiny/learn", timeout=T,
                      json={"records": list(records)})


def record(rid: str, subjects: list[str], rejected: tuple[str, ...] = (),
           added: tuple[str, ...] = ()) -> dict:
    return {"id": rid, "title": "Pilze am Fachwerk", "abstract": "fungi timber rot",
            "language": "de", "subjects": subjects, "rejected": list(rejected),
            "added": list(added)}


def memory_subjects(project: Project, rid: str) -> list[str]:
    memory = project.trained_recipe().pipeline.memory
    return sorted(project.vocab.subjects[i].id for i in memory.Y[memory.row_of(rid)].indices)


def test_tagalign_s_learn_stores_a_redirected_id_as_its_target(served):
    url, project, store = served
    res = learn(url, record("r1", [PILZE, EPOS], added=(PILZE,)),
                record("r2", [PILZE], rejected=(HOLZSCHUTZ,)))
    assert res.status_code == 200, res.text
    assert res.json() == {"stored": 3, "learned": True, "redirected": {PILZE: HOLZSCHUTZ}}
    assert store.latest_decisions("tiny", "r1") == {HOLZSCHUTZ: "accept", EPOS: "accept"}
    # accepted as the target and rejected as itself: accepted (an accept wins)
    assert store.latest_decisions("tiny", "r2") == {HOLZSCHUTZ: "accept"}
    (r1,) = [r for r in store.reviewed("tiny") if r.record.id == "r1"]
    assert r1.origins == {HOLZSCHUTZ: "added", EPOS: "suggested"}
    assert memory_subjects(project, "r1") == sorted([HOLZSCHUTZ, EPOS])


def test_tagalign_s_learn_refuses_deleted_and_split_ids_as_unknown_ones(served):
    url, _, store = served
    for subjects, detail in (
            ([ZUKUNFT], f"subject ids of headings deleted or split since: {ZUKUNFT}"),
            ([EPOS, DENKMAL], f"subject ids of headings deleted or split since: {DENKMAL}"),
            ([UNKNOWN, ZUKUNFT], f"subject ids not in the vocabulary: {UNKNOWN}; subject ids "
                                 f"of headings deleted or split since: {ZUKUNFT}")):
        res = learn(url, record("r3", subjects))
        assert res.status_code == 422 and res.json()["detail"] == detail, res.text
    res = learn(url, record("r3", [EPOS], rejected=(DENKMAL,)))
    assert res.status_code == 422 and DENKMAL in res.json()["detail"]
    assert list(store.reviewed("tiny")) == []


def test_every_other_learn_answers_as_before(served):
    url, _, store = served
    res = learn(url, record("r4", [EPOS, HOLZSCHUTZ]))
    assert res.status_code == 200 and res.content == b'{"stored":2,"learned":true}'
    res = learn(url, record("r5", [UNKNOWN]))
    assert res.status_code == 422
    assert res.json()["detail"] == f"subject ids not in the vocabulary: {UNKNOWN}"
    assert store.latest_decisions("tiny", "r4") == {EPOS: "accept", HOLZSCHUTZ: "accept"}


def test_annif_s_learn_learns_the_target_and_ignores_deleted_and_split_ids(served):
    url, project, store = served

    def doc(text: str, *ids: str) -> dict:
        return {"text": text, "subjects": [{"uri": f"https://d-nb.info/gnd/{sid}"}
                                           for sid in ids]}

    res = httpx.post(f"{url}/v1/projects/tiny/learn", timeout=T, json=[
        doc("Pilze am Fachwerk\nfungi timber rot", PILZE, ZUKUNFT, HOLZSCHUTZ),
        doc("Denkmalpflege\nmonument heritage", DENKMAL, UNKNOWN)])
    assert res.status_code == 204 and res.content == b""
    (only,) = store.reviewed("tiny")  # the second: no subject the vocabulary suggests
    assert only.record.subjects == [HOLZSCHUTZ] and only.record.id.startswith("annif:")
    assert memory_subjects(project, only.record.id) == [HOLZSCHUTZ]
