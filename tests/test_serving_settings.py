"""A project's serving settings (`tagalign.project.ServingSettings`): one frozen object,
given at load or by `with_serving`, which returns another `Project` sharing the folder,
vocabulary and model; a loaded project's settings cannot be set; checked against the
vocabulary; a projects file's table reads into the same object."""

from __future__ import annotations

import dataclasses

import pytest

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from suggesting import suggestions
from tagalign.project import Project, ServingSettingError, ServingSettings
from tagalign.projects_file import open_project, read_projects
from tagalign.vocab.rules import SubjectRules
from tiny_models import TOPICS, tiny_records, tiny_vocab

PILZE, EPOS = "4046076-9", "4015065-3"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("serving") / "toy"
    Project.create(path, tiny_vocab(), "test-overlap").train(tiny_records(40))
    return path


def test_a_loaded_project_is_served_as_loaded(trained):
    plain = Project.load(trained)
    assert plain.serving == ServingSettings() and not plain.allow_learn
    with pytest.raises(AttributeError):
        plain.allow_learn = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.serving.limit = 3  # type: ignore[misc]
    served = Project.load(trained, serving=ServingSettings(allow_learn=True, limit=3,
                                                           name="Toy"))
    assert served.allow_learn and served.limit == 3 and served.info()["name"] == "Toy"
    assert plain.info()["name"] == "toy"  # the saved name


def test_with_serving_is_another_project_with_the_same_model(trained):
    plain = Project.load(trained)
    rules = SubjectRules((PILZE,))
    served = plain.with_serving(ServingSettings(rules=rules))
    assert served is not plain and served.recipe is plain.recipe and served.vocab is plain.vocab
    assert plain.rules == SubjectRules() and served.excluded == {PILZE}
    record = tiny_records(1)[0]
    assert PILZE not in {s.id for s in suggestions(served, [record], limit=len(TOPICS))[0]}


def test_settings_that_do_not_fit_the_vocabulary_are_refused(trained):
    plain = Project.load(trained)
    with pytest.raises(ServingSettingError, match="not in the vocabulary") as exc:
        plain.with_serving(ServingSettings(rules=SubjectRules(("0000000-0",))))
    assert exc.value.key == "exclude/include"
    with pytest.raises(ServingSettingError, match="'fr' is not a language") as exc:
        plain.with_serving(ServingSettings(language="fr"))
    assert exc.value.key == "language"


def test_a_projects_file_table_reads_into_serving_settings(trained, tmp_path):
    toml = tmp_path / "projects.toml"
    toml.write_text(f"""
[toy]
path = "{trained}"
name = "Toy"
language = "en"
limit = 5
threshold = 0.25
allow_learn = true
exclude = ["{EPOS}"]
feedback_db = "fb.sqlite"
""", encoding="utf-8")
    spec = read_projects(toml)["toy"]
    assert spec.serving == ServingSettings(
        name="Toy", language="en", limit=5, threshold=0.25, allow_learn=True,
        rules=SubjectRules((EPOS,)), feedback_db=f"sqlite:///{(tmp_path / 'fb.sqlite').resolve()}")
    project = open_project(spec)
    assert project.serving == spec.serving
    assert project.config.name == "toy"  # the folder's config is not changed
