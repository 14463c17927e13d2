"""`tagalign vocab update`: change files applied to a trained project without retraining
(`tagalign.shipping.vocab_update`), on the tiny trained hybrid: each kind of change as the
DNB's GND-Änderungsdienst delivers it (leader/05 and field 682: `marc_authority`), files
applied twice, a malformed file, a failure midway, and the fingerprint checks after."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from marc_authority import authority, field_682, shortened, status, with_682, write_xml
from tagalign.cli import app
from tagalign.errors import InputError
from tagalign.project import Project, Tagger
from tagalign.recipes import Recipe
from tagalign.records import Record
from tagalign.shipping.swap import incoming
from tagalign.shipping.vocab_update import update_vocabulary
from tagalign.suggest import SuggestRequest
from tagalign.vocab import Subject, Vocabulary, VocabularyMismatchError
from tagalign.vocab.changes import BadChangesError, ChangeSet, Deleted, Heading, Redirected
from tagalign.vocab.changes.apply import plan_update
from tiny_models import KNN_LEXICAL_HYBRID, TOPICS, tiny_records, tiny_vocab

runner = CliRunner()
ZEPPELIN = "1300000001"
PILZE, HOLZSCHUTZ = "4046076-9", "4025741-1"
PHILOSOPHIE, ZUKUNFT, DENKMAL = "4045791-6", "4068097-6", "4011455-7"


def week() -> list:
    """One week's records: a new heading (n), a corrected one (c), a redirect (x, 682 $0
    the target, $a its name), a deletion (d, 682 $i Loeschung), a split (c, 682 naming
    it), a redirect announced (c, 682 $i Umlenkung) and one for an id the project never had."""
    return [
        authority(ZEPPELIN, "Zeppelin", alts=["Luftschiff"], leader=status("n")),
        authority(PHILOSOPHIE, "Weltweisheit", leader=status("c")),
        shortened(PILZE, "x", field_682(None, (HOLZSCHUTZ, "Holzschutz"))),
        shortened(ZUKUNFT, "d", field_682("Loeschung")),
        with_682(authority(DENKMAL, "Denkmalpflege", leader=status("c")),
                 field_682("Aufspaltung ohne Umlenkung")),
        with_682(authority("4015065-3", "Epos", leader=status("c")),
                 field_682("Umlenkung", ("4033447-8", "Künstliche Intelligenz"))),
        shortened("4999999-9", "d", field_682("Loeschung")),
    ]


@pytest.fixture
def week_file(tmp_path) -> Path:
    return write_xml(tmp_path / "GND_Aenderungsdienst_20240702.mrc.xml", week())


RECORDS = [Record(id="z", title="Zeppelin", abstract="hangar", language="de"),
           Record(id="p", title="Pilze", abstract="fungi mushroom rot decay mould",
                  language="en"),
           Record(id="w", title="Weltweisheit", abstract="truth reason", language="de"),
           Record(id="f", title="Zukunft", abstract="future forecast trend monument heritage",
                  language="en")]


def suggested(path: Path, records=RECORDS, limit: int = 8) -> list[dict[str, tuple]]:
    tagger = Tagger(Project.load(path))
    return [{s.id: (round(s.score, 6), s.label, tuple(s.reasons["sources"]))
             for s in t.suggestions}
            for t in tagger.tag(records, SuggestRequest(limit=limit))]


def tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_each_kind_of_change_on_a_trained_hybrid(tiny_hybrid_copy, week_file):
    path = tiny_hybrid_copy
    before = suggested(path)
    assert ZEPPELIN not in before[0] and PILZE in before[1]
    done = update_vocabulary(path, [week_file])
    assert done.written
    assert done.update.counts() == {"added": 1, "relabelled": 1, "redirected": 1, "split": 1,
                                    "deleted": 1, "announced": 1, "unknown_skipped": 1}
    after = suggested(path)
    # a new heading named word for word in a title is suggested at once, by its label
    assert ZEPPELIN in after[0] and after[0][ZEPPELIN][1] == "Zeppelin"
    assert "lexical" in after[0][ZEPPELIN][2]
    # a redirected heading is never suggested; its evidence counts for its target
    assert all(PILZE not in row for row in after)
    assert after[1][HOLZSCHUTZ][0] > before[1][HOLZSCHUTZ][0]
    assert after[1][HOLZSCHUTZ][0] == pytest.approx(before[1][PILZE][0], abs=0.2)
    # deleted and split headings never; the corrected label everywhere
    assert all(ZUKUNFT not in row and DENKMAL not in row for row in after)
    assert after[2][PHILOSOPHIE][1] == "Weltweisheit" and "lexical" in after[2][PHILOSOPHIE][2]
    # every tiny record's list, however long: no retired heading
    lists = suggested(path, tiny_records(40, seed=3), limit=20)
    assert not {PILZE, ZUKUNFT, DENKMAL} & {sid for row in lists for sid in row}
    # announced: not yet effective (Epos still suggested where it was)
    assert "4015065-3" in {sid for row in lists for sid in row}


def test_the_state_is_recorded_and_shown(tiny_hybrid_copy, week_file):
    path = tiny_hybrid_copy
    update_vocabulary(path, [week_file])
    project = Project.load(path)
    state = project.config.vocabulary["state"]
    assert state["trained_with"] == {"size": 8, "fingerprint": tiny_vocab().fingerprint}
    assert state["last_file"] == week_file.name and state["last_date"] == "2024-07-02"
    assert state["updates"] == 1 and state["applied"][0]["sha256"]
    assert state["counts"] == {"subjects": 9, "suggestable": 6, "added": 1, "redirected": 1,
                               "deleted": 1, "split": 1, "announced": 1}
    assert state["split"] == [{"id": DENKMAL, "label": "Denkmalpflege"}]
    assert project.info()["vocabulary_state"] == state
    assert project.info()["vocabulary_size"] == project.vocab.n_suggestable == 6
    assert project.vocab.retired == {PILZE: ("redirected", HOLZSCHUTZ),
                                     ZUKUNFT: ("deleted", None), DENKMAL: ("split", None)}
    # the type-ahead search offers no retired heading
    assert not project.vocab.search("Pilze") and project.vocab.search("Zeppelin")


def test_a_file_applied_again_changes_nothing(tiny_hybrid_copy, week_file):
    path = tiny_hybrid_copy
    update_vocabulary(path, [week_file])
    files, answers = tree(path), suggested(path)
    again = update_vocabulary(path, [week_file])
    assert not again.written and again.update.empty
    assert tree(path) == files and suggested(path) == answers


def test_an_empty_change_file_changes_no_suggestion(tiny_hybrid_copy, tmp_path):
    path = tiny_hybrid_copy
    answers = suggested(path, tiny_records(30, seed=4), limit=10)
    empty = write_xml(tmp_path / "empty_20240709.mrc.xml", [])
    assert update_vocabulary(path, [empty]).written  # recorded as applied
    assert suggested(path, tiny_records(30, seed=4), limit=10) == answers
    assert Project.load(path).config.vocabulary["state"]["last_date"] == "2024-07-09"


def test_a_malformed_file_applies_nothing_unless_skipped(tiny_hybrid_copy, tmp_path):
    path = tiny_hybrid_copy
    broken = week()
    broken.insert(1, shortened("4888888-8", "x", field_682("Umlenkung")))  # no target
    bad = write_xml(tmp_path / "bad.mrc.xml", broken)
    files = tree(path)
    with pytest.raises(BadChangesError, match=r"bad.mrc.xml: record 2"):
        update_vocabulary(path, [bad], option="--skip-bad")
    assert tree(path) == files
    done = update_vocabulary(path, [bad], skip_bad=True, report=None)
    assert done.written and done.update.counts()["added"] == 1


def test_a_failure_midway_leaves_the_project_as_it_was(tiny_hybrid_copy, week_file,
                                                       monkeypatch):
    path = tiny_hybrid_copy
    files, answers = tree(path), suggested(path)

    def broken(self, folder, saved=None):
        folder.mkdir(parents=True)
        (folder / "half.bin").write_bytes(b"x")
        raise OSError("the disk went away")

    monkeypatch.setattr(Recipe, "save", broken)
    with pytest.raises(OSError, match="went away"):
        update_vocabulary(path, [week_file])
    assert tree(path) == files and not incoming(path).exists()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")
                and not p.name.endswith(".lock")]
    assert suggested(path) == answers


def test_an_updated_project_refuses_another_vocabulary(tiny_hybrid_copy, week_file,
                                                       tmp_path):
    path = tiny_hybrid_copy
    update_vocabulary(path, [week_file])
    updated = Vocabulary.load(path)
    with pytest.raises(VocabularyMismatchError, match="another vocabulary"):
        Project.load(path, tiny_vocab())
    # a project trained with the updated vocabulary: its retired headings stay unsuggested
    # and it refuses any other vocabulary, the one before the update too
    other = Project.create(tmp_path / "retrained", updated, "hybrid", KNN_LEXICAL_HYBRID)
    other.train(tiny_records(80, seed=5))
    assert Project.load(other.path).vocab.fingerprint == updated.fingerprint
    with pytest.raises(VocabularyMismatchError, match="another vocabulary"):
        Project.load(other.path, tiny_vocab())
    lists = suggested(other.path, tiny_records(20, seed=6), limit=9)
    assert not {PILZE, ZUKUNFT, DENKMAL} & {sid for row in lists for sid in row}


def test_the_vocabulary_keeps_its_positions_and_saves_its_state(tmp_path):
    old = tiny_vocab()
    changes = ChangeSet.of([
        Heading(id="9", subject=Subject("9", {"de": "Neu"})),
        Redirected(id=PILZE, target="9"), Deleted(id=ZUKUNFT)])
    plan = plan_update(changes, old)
    new = plan.new
    assert new.ids[:len(old)] == old.ids and new.ids[-1] == "9" and plan.added == [8]
    successor = new.successors()
    assert successor is not None and successor[new.position(PILZE)] == 8
    assert successor[new.position(ZUKUNFT)] == -1 and old.successors() is None
    assert new.fingerprint != old.fingerprint
    back = Vocabulary.load(new.save(tmp_path))
    assert back.fingerprint == new.fingerprint and back.retired == new.retired
    assert back.revision == new.revision
    # a chain made over two updates ends at the last target
    again = plan_update(ChangeSet.of([Redirected(id="9", target=HOLZSCHUTZ)]), back)
    assert again.new.retired[PILZE] == ("redirected", HOLZSCHUTZ)
    # what is already so is no change
    assert plan_update(changes, back).empty
    # a vocabulary never updated saves and fingerprints as before
    saved = old.save(tmp_path / "old")
    assert not {"retired", "revision"} & set(json.loads(gzip.decompress(saved.read_bytes())))
    assert Vocabulary.load(saved).fingerprint == old.fingerprint == hashlib.sha256(
        "\n".join(old.ids).encode()).hexdigest()[:16]


def test_redirected_candidates_merge_into_their_target():
    from tagalign.suggest.sources.base import Candidates

    c = Candidates(np.array([0, 0, 0, 1]), np.array([2, 1, 3, 1]),
                   np.array([[0.9, 1], [0.5, 2], [0.4, 3], [0.7, 1]], np.float32),
                   ["x_sim", "x_rank"])
    successor = np.array([0, 1, 1, -1])  # 2 → 1, 3 deleted
    got = c.followed(successor)
    assert got.rows.tolist() == [0, 1] and got.cols.tolist() == [1, 1]
    assert got.feats[:, 0].tolist() == pytest.approx([0.9, 0.7])  # the better ranked stays
    assert c.followed(np.arange(4)) is c


def test_the_label_source_takes_new_and_corrected_headings(tmp_path):
    from tagalign.encode.static import StaticEmbeddingEncoder
    from tagalign.suggest.sources.base import Batch, FitContext, NewHeadings
    from tagalign.suggest.sources.labels import LabelRetrieval
    from tagalign.text import Analyzer
    from tiny_models import static_model

    encoder = StaticEmbeddingEncoder.load(static_model(tmp_path / "s", dim=32))
    old = tiny_vocab()
    src = LabelRetrieval(top_k=3, index="flat", title_top_k=0)
    src.fit(FitContext(old, Analyzer(), encoder=encoder))
    new = Vocabulary([*(Subject(s.id, {"de": "timber mould"}) if s.id == PILZE else s
                        for s in old), Subject(ZEPPELIN, {"de": "airship"},
                                               {"de": ["blimp hangar"]})])
    src.take_headings(NewHeadings(added=[8], relabelled=[old.position(PILZE)]),
                      FitContext(new, Analyzer(), encoder=encoder))

    def first(text: str, source=src) -> int:
        batch = Batch([Record(id="q", title=text)], ["en"],
                      embeddings=encoder.encode([text]))
        c = source.candidates(batch)
        return int(c.cols[np.argmin(c.feats[:, 1])])

    assert first("airship") == 8 and first("blimp hangar") == 8
    assert first("timber mould") == old.position(PILZE)
    assert first(TOPICS[PILZE][0]) != old.position(PILZE)  # its old label names it no more
    src.save(tmp_path / "saved")
    back = LabelRetrieval(top_k=3, index="flat")
    back.load_state(tmp_path / "saved", FitContext(new, Analyzer()))
    assert [first(t, back) for t in ("airship", "blimp hangar", TOPICS[PILZE][0])] == [
        first(t) for t in ("airship", "blimp hangar", TOPICS[PILZE][0])]


def test_the_command_prints_what_it_did(tiny_hybrid_copy, week_file):
    res = runner.invoke(app, ["vocab", "update", str(tiny_hybrid_copy), str(week_file),
                              "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "redirected" in res.output and "Holzschutz" in res.output
    assert "nothing written: --dry-run" in res.output
    res = runner.invoke(app, ["vocab", "update", str(tiny_hybrid_copy), str(week_file),
                              "--json"])
    assert res.exit_code == 0, res.output
    done = json.loads(res.output)
    assert done["written"] and done["redirected"] == [
        {"id": PILZE, "target": HOLZSCHUTZ, "target_label": "Holzschutz"}]
    assert done["split"] == [{"id": DENKMAL, "label": "Denkmalpflege", "targets": []}]
    assert done["unknown"] == ["4999999-9"] and done["announced"] == ["4015065-3"]
    res = runner.invoke(app, ["vocab", "update", str(tiny_hybrid_copy), str(week_file)])
    assert res.exit_code == 0 and "applied already" in res.output


def test_rules_and_requests_naming_a_redirected_id_mean_its_target(tiny_hybrid_copy,
                                                                   week_file, caplog):
    from tagalign.project import ServingSettings
    from tagalign.vocab.rules import SubjectRules

    path = tiny_hybrid_copy
    update_vocabulary(path, [week_file])
    with caplog.at_level("WARNING", logger="tagalign.project.serving"):
        project = Project.load(path, serving=ServingSettings(
            rules=SubjectRules(exclude=(PILZE,))))
    assert f"{PILZE} → {HOLZSCHUTZ}" in caplog.text
    assert project.excluded == {HOLZSCHUTZ}
    fungi = RECORDS[1:2]
    assert HOLZSCHUTZ not in {s.id for s in Tagger(project).tag(
        fungi, SuggestRequest(limit=8))[0].suggestions}
    plain = Tagger(Project.load(path))
    assert HOLZSCHUTZ in {s.id for s in plain.tag(fungi, SuggestRequest(limit=8))[0].suggestions}
    assert HOLZSCHUTZ not in {s.id for s in plain.tag(
        fungi, SuggestRequest(limit=8, exclude=frozenset({PILZE})))[0].suggestions}


def test_the_python_api_page_s_example_runs_as_written(tiny_hybrid_copy, tmp_path,
                                                       monkeypatch, capsys):
    import re

    text = (Path(__file__).resolve().parents[1] / "docs/python-api.md").read_text("utf-8")
    section = text.split("\n## Keeping up with the GND\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    write_xml(tmp_path / "GND_Aenderungsdienst_20240702.mrc.xml.gz", week(), gz=True)
    (tmp_path / "gnd-hybrid").symlink_to(tiny_hybrid_copy)
    with pytest.raises(InputError, match="symbolic link"):  # the swap would replace the link
        update_vocabulary(tmp_path / "gnd-hybrid", [tmp_path / "x.mrc.xml"])
    (tmp_path / "gnd-hybrid").unlink()
    tiny_hybrid_copy.rename(tmp_path / "gnd-hybrid")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "docs/python-api.md", "exec"), scope)  # noqa: S102 - our docs
    assert scope["done"].written and scope["done"].state["last_date"] == "2024-07-02"
    lines = capsys.readouterr().out.splitlines()
    assert PILZE in lines[0] and lines[2].startswith("2024-07-02 {'subjects': 9")


def test_show_project_shows_the_state_and_the_splits(tiny_hybrid_copy, week_file, tmp_path):
    update_vocabulary(tiny_hybrid_copy, [week_file])
    src = tmp_path / "projects.toml"
    src.write_text(f'[tiny]\npath = "{tiny_hybrid_copy}"\nexclude = ["{PILZE}"]\n',
                   encoding="utf-8")
    res = runner.invoke(app, ["show-project", "tiny", "--projects", str(src)])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output[res.output.index("{"):])
    assert shown["vocabulary_state"]["split"] == [{"id": DENKMAL, "label": "Denkmalpflege"}]
    assert shown["vocabulary_state"]["counts"]["suggestable"] == 6
    assert shown["vocabulary_size"] == 6  # what can be suggested: 9 headings, 3 retired
    assert shown["excluded"] == 1  # the redirected id means its target


def test_training_after_an_update_learns_the_targets(tiny_hybrid_copy, week_file):
    from tagalign.workflows import train_project

    update_vocabulary(tiny_hybrid_copy, [week_file])
    project = Project.load(tiny_hybrid_copy)
    records = tiny_records(120, seed=0)
    retired = {PILZE, ZUKUNFT, DENKMAL}
    expected_mapped = sum(PILZE in r.subjects for r in records)
    expected_dropped = sum(s in (ZUKUNFT, DENKMAL) for r in records for s in r.subjects)
    done = train_project(project, records, feedback=False)
    assert (done.gold_mapped, done.gold_dropped) == (expected_mapped, expected_dropped) != (0, 0)
    Y = project.trained_recipe().pipeline.memory.Y.tocsc()
    assert all(Y[:, project.vocab.position(s)].nnz == 0 for s in retired)
    assert Y[:, project.vocab.position(HOLZSCHUTZ)].nnz >= expected_mapped
