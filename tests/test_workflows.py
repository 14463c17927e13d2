"""The library's workflows (`tagalign.workflows`): docs/python-api.md's training examples
run as written on tiny data, and `train_project` merges the librarians' feedback and keeps
the dev scores as `tagalign train` does."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from tagalign.classify import Classifier
from tagalign.feedback import Decision, FeedbackStore
from tagalign.project import Project
from tagalign.records import Record
from tagalign.workflows import train_project
from test_domains_stack import with_domains, write
from tiny_models import TOPICS, tiny_records, tiny_vocab

ROOT = Path(__file__).resolve().parents[1]


def section_code(heading: str) -> str:
    """The ```python blocks of one ``## heading`` of docs/python-api.md, in order."""
    text = (ROOT / "docs/python-api.md").read_text(encoding="utf-8")
    part = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", part, re.M | re.S)
    assert blocks, heading
    return "\n".join(blocks)


def test_the_training_examples_run_as_written(tmp_path, monkeypatch, capsys):
    """Both sections on the tiny vocabulary and records (domains: `with_domains`)."""
    with gzip.open(tmp_path / "gnd-subjects.tsv.gz", "wt", encoding="utf-8") as fh:
        fh.write("gnd_id\tlabel_de\tlabel_en\n")
        fh.writelines(f"{sid}\t{label}\t{words.split()[0]}\n"
                      for sid, (label, words) in TOPICS.items())
    write(tmp_path / "train.jsonl.gz", with_domains(tiny_records(120, seed=0)))
    write(tmp_path / "dev.jsonl.gz", with_domains(tiny_records(60, seed=5), prefix="d"))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(section_code("Training a project"), "python-api.md", "exec"), scope)  # noqa: S102
    done = scope["done"]
    assert done.records == 120 and done.confirmed == 0 and done.project.is_trained
    saved = json.loads((tmp_path / "my-hybrid/project.json").read_text())
    assert saved["dev_scores"] == done.dev_scores["overall"]
    assert done.dev_scores["overall"]["n"] == 60
    exec(compile(section_code("Training a domain model"), "python-api.md", "exec"), scope)  # noqa: S102
    done = scope["done"]
    model = Classifier.load(tmp_path / "my-domains")
    assert model.name == "subjects-stack" and done.held_out > 0
    assert model.held_out_records_ == done.held_out
    assert model.subjects_project_ == str((tmp_path / "my-hybrid").resolve())
    config = json.loads((tmp_path / "my-domains/config.json").read_text())
    assert config["dev_scores"]["micro_f1"] == done.dev_scores["micro_f1"]
    stack = scope["stack"]  # the estimator alone: `fit` set what it learned from
    assert stack.subjects_project_ == model.subjects_project_
    assert stack.tuning_scores_.shape == (60, len(stack.labels_))
    out = capsys.readouterr().out
    assert "F1@5 on dev:" in out and "subjects-stack micro-F1 on dev:" in out


def test_train_project_learns_the_confirmed_records_and_keeps_the_dev_scores(tmp_path):
    project = Project.create(tmp_path / "p", tiny_vocab(), "test-overlap")
    confirmed = Record(id="fb-1", title="Rückmeldung", abstract="fungi epic", language="de")
    store = FeedbackStore.for_project(project.path)
    store.add("p", [Decision(confirmed, ["4046076-9"], ["4015065-3"])])
    store.close()
    records, dev = tiny_records(20), tiny_records(10, seed=3)
    done = train_project(project, records, dev)
    assert (done.records, done.confirmed) == (21, 1) and len(records) == 20  # not changed
    learned = json.loads((project.path / "model/records.json").read_text())
    assert {row["id"]: row for row in learned}["fb-1"]["subjects"] == ["4046076-9"]
    assert Project.read_config(project.path)["dev_scores"] == done.dev_scores["overall"]
    again = train_project(Project.load(project.path), records, feedback=False)
    assert (again.records, again.confirmed, again.dev_scores) == (20, 0, None)
