"""`tagalign vocab update` by recipe: a recipe without an update path refuses before it
reads a change file, saying why and to retrain, and leaves the folder as it was byte for
byte; a hybrid with ``domains=true`` takes the update (its domain part is keyed by
vocabulary position and widens: `tagalign.classify.source.DomainSource.bind`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from marc_authority import write_xml
from tagalign.cli import app
from tagalign.errors import InputError
from tagalign.project import Project, Tagger
from tagalign.records import Record
from tagalign.shipping.vocab_update import update_vocabulary
from tagalign.suggest import SuggestRequest
from test_domains_source import domain_records
from test_vocab_update import DENKMAL, HOLZSCHUTZ, PILZE, ZEPPELIN, ZUKUNFT, week
from tiny_models import tiny_records, tiny_vocab

runner = CliRunner()
RETIRED = {PILZE, ZUKUNFT, DENKMAL}


def contents(path: Path) -> dict[str, str]:
    """Every file and folder under ``path`` with the SHA-256 of its bytes."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(path.rglob("*"))}


@pytest.fixture
def week_file(tmp_path) -> Path:
    return write_xml(tmp_path / "GND_Aenderungsdienst_20240702.mrc.xml", week())


def test_a_recipe_without_an_update_path_refuses_and_changes_nothing(tmp_path, week_file):
    path = tmp_path / "lexical"
    Project.create(path, tiny_vocab(), "lexical").train(tiny_records(40))
    before = contents(path)
    for extra in ([], ["--dry-run"], ["--json"]):
        res = runner.invoke(app, ["vocab", "update", str(path), str(week_file), *extra])
        assert res.exit_code != 0
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), res.output
        assert "'lexical' has no update path" in lines[0]
        assert "retrain the project" in lines[0] and "(`tagalign train`)" in lines[0]
    with pytest.raises(InputError, match="no update path"):
        update_vocabulary(path, [week_file])
    # refused before the change file is read: a file that is no change file says nothing
    with pytest.raises(InputError, match="no update path"):
        update_vocabulary(path, [tmp_path / "missing.mrc.xml"])
    assert contents(path) == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".lexical.")
                and not p.name.endswith(".lock")]


def test_a_hybrid_with_domains_takes_the_update(tmp_path, week_file):
    path = tmp_path / "domains"
    params = {"sources": ["omikuji", "tfidf_knn", "lexical"], "domains": True,
              "holdout_fraction": 0.3, "ranker_rounds": 30, "knn_k": 10}
    Project.create(path, tiny_vocab(), "hybrid", params).train(domain_records(240, seed=1))
    done = update_vocabulary(path, [week_file])
    assert done.written and done.update.counts()["added"] == 1
    project = Project.load(path)  # the saved domain counts fit the updated vocabulary
    source = next(s for s in project.trained_recipe().pipeline.sources if s.name == "domains")
    assert source.counts_.shape[0] == len(project.vocab) == 9
    assert source.counts_[8].nnz == 0  # the new heading: no training record carried it
    queries = [Record(id="z", title="Zeppelin", abstract="hangar", language="de"),
               *domain_records(30, seed=2)]
    tagged = Tagger(project).tag(queries, SuggestRequest(limit=9))
    lists = [[s.id for s in t.suggestions] for t in tagged]
    assert ZEPPELIN in lists[0]
    assert not RETIRED & {sid for row in lists for sid in row}
    assert any("domains" in s.reasons["sources"] for t in tagged for s in t.suggestions)
    assert any(HOLZSCHUTZ in row for row in lists)
