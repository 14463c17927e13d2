"""Subject search by label prefix and the review queue, over real HTTP with a real SQLite
feedback store (the toy project of tests/serving.py: milliseconds, no shared data)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import httpx
import pytest

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings, Tagger
from tagalign.records import Record
from tagalign.serve.app import create_app
from tagalign.serve.queue import RecordQueue
from tagalign.suggest import Quality, Tagged
from tagalign.vocab import Subject, Vocabulary
from tagalign.vocab.prefix import PrefixIndex
from tiny_models import tiny_records, tiny_vocab

API = "/tagalign/v1"


# -- the prefix index ------------------------------------------------------------------------
def _index() -> PrefixIndex:
    return PrefixIndex([
        Subject("1", {"de": "Holzschutzmittel", "en": "Wood preservative"}),
        Subject("2", {"de": "Holz", "en": "Wood"}),
        Subject("3", {"de": "Holzschutz", "en": "Timber protection"},
                alt_labels={"de": ["Holzkonservierung", "Holzschutzverfahren"]}),
        Subject("4", {"de": "Straße"}),
        Subject("5", {"de": "Ärztin"}),
        Subject("6", {"de": "Honig"}),
    ])


def test_prefix_search_order_case_languages_and_duplicates():
    ix = _index()
    assert len(ix) == 11  # every preferred and alternate label of both languages
    # exact match first, then longer labels in order; subject 3 once although two of its
    # labels ("Holzschutz", "Holzschutzverfahren") start with the prefix
    assert [(m.subject.id, m.label) for m in ix.search("holzschutz")] == [
        ("3", "Holzschutz"), ("1", "Holzschutzmittel")]
    assert [m.subject.id for m in ix.search("HOLZ")] == ["2", "3", "1"]
    assert [m.subject.id for m in ix.search("holz", limit=2)] == ["2", "3"]
    # English labels, with the language that matched
    assert [(m.subject.id, m.language) for m in ix.search("wood")] == [("2", "en"), ("1", "en")]
    # alternate labels find their subject and say so
    konserv = ix.search("holzkons")
    assert [(m.subject.id, m.label, m.preferred) for m in konserv] == [
        ("3", "Holzkonservierung", False)]
    # casefolding (ß = ss) and a decomposed umlaut as typed on some keyboards
    assert [m.subject.id for m in ix.search("STRASS")] == ["4"]
    assert [m.subject.id for m in ix.search(unicodedata.normalize("NFD", "ärz"))] == ["5"]
    assert ix.search("") == [] and ix.search("   ") == [] and ix.search("xyz") == []


def test_vocabulary_builds_its_prefix_index_once(tmp_path: Path):
    vocab = tiny_vocab()
    assert vocab.prefix_index is vocab.prefix_index
    loaded = Vocabulary.load(vocab.save(tmp_path))  # `load` bypasses __init__
    assert [m.subject.id for m in loaded.prefix_index.search("holz")] == ["4025741-1"]


# -- the HTTP endpoints ----------------------------------------------------------------------
def _project(root: Path) -> Project:
    project = Project.create(root / "toy", tiny_vocab(), "test-overlap", {})
    project.train(tiny_records(40))
    # the queue stores decisions through learn (Annif: off)
    return project.with_serving(ServingSettings(allow_learn=True))


QUEUE = [Record(id=f"q{i}", title=title, abstract=abstract, language="de")
         for i, (title, abstract) in enumerate([
             ("Pilze im Fachwerk", "wood rot timber decay"),
             ("Epos und Held", "epic hero poem saga"),
             ("Maschinelles Lernen", "neural network learning"),
             ("Denkmalpflege heute", "monument heritage restoration")])]
# a stand-in for the projects' quality estimates: q1 and q3 can be released at 0.8
RECALL = {"q0": 0.3, "q1": 0.9, "q2": None, "q3": 0.85}


def _estimate(_project: Project, records) -> list[float | None]:
    return [RECALL[r.id] for r in records]


@pytest.fixture()
def served(tmp_path: Path):
    project = _project(tmp_path)
    db = tmp_path / "toy" / "feedback.sqlite"

    def start(queue: RecordQueue | None):
        return LiveServer(create_app({"toy": project}, FeedbackStore.for_project(db.parent),
                                     review=queue))
    return start


def test_subjects_endpoint(served):
    with served(None) as srv:
        url = f"{srv.url}{API}/projects/toy/subjects"
        got = httpx.get(url, params={"prefix": "holz"}).json()["subjects"]
        assert [(x["id"], x["label"], x["matched"], x["language"]) for x in got] == [
            ("4025741-1", "Holzschutz", "Holzschutz", "de")]
        assert got[0]["uri"] == "https://d-nb.info/gnd/4025741-1"
        assert got[0]["labels"] == {"de": "Holzschutz", "en": "timber"}
        # English label, any case; the preferred label shown is the English one
        got = httpx.get(url, params={"prefix": "FUN"}).json()["subjects"]
        assert [(x["id"], x["label"], x["language"]) for x in got] == [
            ("4046076-9", "fungi", "en")]
        many = httpx.get(url, params={"prefix": "d", "limit": 2}).json()["subjects"]
        assert [x["label"] for x in many] == ["Denkmalpflege", "digital"]
        assert httpx.get(url, params={"prefix": ""}).status_code == 422
        assert httpx.get(url, params={"prefix": "a", "limit": 0}).status_code == 422
        missing = httpx.get(f"{srv.url}{API}/projects/nope/subjects", params={"prefix": "a"})
        assert missing.status_code == 404 and "known: toy" in missing.json()["detail"]
        # without --queue the queue is absent, with a message saying how to get one
        no_queue = httpx.get(f"{srv.url}{API}/projects/toy/queue")
        assert no_queue.status_code == 404 and "--queue" in no_queue.json()["detail"]


def test_queue_releases_finishes_and_resumes_after_restart(served):
    queue = RecordQueue(QUEUE, release_above=0.8, estimate=_estimate)
    with served(queue) as srv:
        base = f"{srv.url}{API}/projects/toy/queue"
        status = httpx.get(base).json()
        # q1 (0.9) and q3 (0.85) are released; q2 has no estimate and stays
        assert status | {"name": None} == {
            "name": None, "size": 2, "finished": 0, "position": 0, "release_above": 0.8,
            "estimated": True, "skipped": 2}
        item = httpx.get(f"{base}/1").json()
        assert item["record"]["id"] == "q2" and item["finished"] is False
        assert httpx.get(f"{base}/2").status_code == 404

        # decisions go through /learn as on the free-form page; the item returns them
        learn = {"records": [{"id": "q0", "title": QUEUE[0].title, "abstract": QUEUE[0].abstract,
                              "subjects": ["4046076-9"], "rejected": ["4015065-3"]}]}
        assert httpx.post(f"{srv.url}{API}/projects/toy/learn", json=learn).status_code == 200
        item = httpx.get(f"{base}/0").json()
        assert item["decisions"] == {"4046076-9": "accept", "4015065-3": "reject"}
        assert item["labels"] == {"4046076-9": "Pilze", "4015065-3": "Epos"}

        after = httpx.post(f"{base}/0/finish", json={}).json()
        assert (after["finished"], after["position"]) == (1, 1)
        again = httpx.post(f"{base}/0/finish", json={}).json()  # twice: still one finished record
        assert (again["finished"], again["position"]) == (1, 1)

    # a new server on the same SQLite file resumes at the first record not finished
    with served(RecordQueue(QUEUE, release_above=0.8, estimate=_estimate)) as srv:
        base = f"{srv.url}{API}/projects/toy/queue"
        assert httpx.get(f"{base}/0").json()["finished"] is True
        status = httpx.get(base).json()
        assert (status["finished"], status["position"]) == (1, 1)
        done = httpx.post(f"{base}/1/finish", json={}).json()
        assert (done["finished"], done["position"]) == (2, None)

    # another records file is another queue: its progress starts afresh
    with served(RecordQueue(QUEUE[:3], name="other.jsonl")) as srv:
        status = httpx.get(f"{srv.url}{API}/projects/toy/queue").json()
        assert (status["size"], status["finished"], status["position"]) == (3, 0, 0)
        assert status["estimated"] is False and status["skipped"] == 0


def test_estimates_come_from_the_taggers_quality(monkeypatch):
    """`estimated_recall` reads `Tagger.tag`'s quality (issue 20 A) for a 10-subject list;
    a stand-in tagger answers with fixed recalls, one record without an estimate."""
    from tagalign.serve.queue import estimated_recall

    asked = []
    recalls = RECALL

    def tag(self, records, request):
        asked.append(request)
        return [Tagged([], quality=None if recalls[r.id] is None
                       else Quality(recalls[r.id], 0.5)) for r in records]

    monkeypatch.setattr(Tagger, "tag", tag)
    project = object()  # the stand-in tagger never looks at it
    assert estimated_recall(project, QUEUE) == [0.3, 0.9, None, 0.85]
    assert [(a.limit, a.quality) for a in asked] == [(10, True)]
    sel = RecordQueue(QUEUE, release_above=0.8).select("p", project)
    assert [r.id for r in sel.records] == ["q0", "q2"] and sel.skipped == 2
    # a project that cannot estimate (a recipe without an estimator): every record stays
    recalls = dict.fromkeys(RECALL)
    assert estimated_recall(project, QUEUE) == [None] * 4


def test_queue_without_estimates_holds_all_records():
    q = RecordQueue(QUEUE, release_above=0.8, estimate=lambda _p, recs: [None] * len(recs))
    sel = q.select("toy", None)  # the stand-in estimator never looks at the project
    assert [r.id for r in sel.records] == ["q0", "q1", "q2", "q3"] and not sel.estimated
    assert [r.id for r in RecordQueue(QUEUE, 0.8, estimate=None).select("toy", None).records
            ] == ["q0", "q1", "q2", "q3"]
    with pytest.raises(ValueError, match="distinct ids.*q1"):
        RecordQueue([*QUEUE, QUEUE[1]])
    with pytest.raises(ValueError, match="within 0"):
        RecordQueue(QUEUE, release_above=1.5)
