"""`ProjectConfig`: ``project.json`` as a typed object, read and written as the same file
(`tagalign.project.config`)."""

from __future__ import annotations

import json

import pytest

from tagalign.errors import InputError
from tagalign.project import NotAProjectError, Project, ProjectConfig
from tiny_models import tiny_records, tiny_vocab

#: a project.json as an older tagalign wrote it, keys in its order, one this version
#: does not know (``legacy_note``) and the parameters in both files
OLD = {"format": "tagalign-project", "name": "old one", "recipe": "lexical",
       "params": {"max_ngram": 3}, "vocabulary": {"size": 8, "fingerprint": "f", "languages":
                                                  ["de", "en"]},
       "created": "2025-01-01T00:00:00+00:00", "trained_at": "2025-01-02T00:00:00+00:00",
       "versions": {"tagalign": "0.9"}, "legacy_note": {"kept": True}, "threshold": 0.25,
       "limit": 7, "dev_scores": {"f1@5": 0.5},
       "defaults_by_language": {"en": {"limit": 3, "threshold": 0.5}},
       "tuned_params": ["prior_weight"]}


def test_an_old_file_reads_as_typed_fields_and_writes_back_the_same():
    config = ProjectConfig.from_json(json.loads(json.dumps(OLD)))
    assert (config.name, config.recipe, config.params, config.limit, config.threshold) \
        == ("old one", "lexical", {"max_ngram": 3}, 7, 0.25)
    assert config.vocabulary["size"] == 8 and config.tuned_params == ["prior_weight"]
    assert config.extra == {"legacy_note": {"kept": True}}
    out = config.to_json()
    assert out == OLD and list(out) == list(OLD)  # the same keys, in the file's order
    assert json.dumps(out, indent=2) == json.dumps(OLD, indent=2)
    assert config.defaults("en") == (3, 0.5) and config.defaults("de") == (7, 0.25)
    assert config.defaults(None, fallback_limit=9) == (7, 0.25)
    assert ProjectConfig().defaults(None, fallback_limit=9) == (9, 0.0)


def test_new_keys_follow_the_read_ones_and_dropped_params_leave_the_file():
    config = ProjectConfig.from_json({"format": "tagalign-project", "recipe": "hybrid",
                                      "params": {}, "trained_at": None})
    config.set_defaults(5, 0.3)
    config.dev_scores = {"f1@5": 0.1}
    config.drop_params()
    assert config.to_json() == {"format": "tagalign-project", "recipe": "hybrid",
                                "trained_at": None, "dev_scores": {"f1@5": 0.1},
                                "limit": 5, "threshold": 0.3}
    config.set_defaults(2, 0.2, "de")
    assert list(config.to_json())[-1] == "defaults_by_language"
    with pytest.raises(InputError, match="limit must be ≥ 1 and threshold in"):
        config.set_defaults(0, 0.3)


def test_a_project_keeps_its_config_typed_through_training(tmp_path):
    path = tmp_path / "p"
    project = Project.create(path, tiny_vocab(), "lexical", {"max_ngram": 2}, name="toy")
    written = json.loads((path / "project.json").read_text())
    assert list(written) == ["format", "name", "recipe", "params", "vocabulary", "created",
                             "trained_at", "versions"]
    assert written["params"] == {"max_ngram": 2} and written["trained_at"] is None
    assert isinstance(project.config, ProjectConfig) and project.config.params == {
        "max_ngram": 2}
    project.train(tiny_records(20))
    saved = Project.read_config(path)
    assert saved.params is None and saved.trained_at and saved.recipe == "lexical"
    assert "params" not in json.loads((path / "project.json").read_text())
    # a key written by another version survives this one's writes
    raw = json.loads((path / "project.json").read_text())
    (path / "project.json").write_text(json.dumps({**raw, "future": [1, 2]}))
    loaded = Project.load(path)
    loaded.set_scores({"f1@5": 0.2})
    again = json.loads((path / "project.json").read_text())
    assert again["future"] == [1, 2] and again["dev_scores"] == {"f1@5": 0.2}
    assert loaded.info()["recipe"] == "lexical" and loaded.info()["name"] == "toy"
    with pytest.raises(NotAProjectError, match="create one with `tagalign train`"):
        Project.load(tmp_path / "nothing")
    with pytest.raises(NotAProjectError, match="is not a tagalign project"):
        Project.read_config(tmp_path / "nothing")
