"""Excluded subjects never come back, and the limit is still filled from the others:
vocabulary rules (Annif's exclude/include) and per-request exclusions, through
`Tagger.tag` (what the CLI, both REST APIs and batch runs call)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from suggesting import suggestions
from tagalign.project import Project, ServingSettings
from tagalign.recipes import Recipe, register_recipe
from tagalign.records import Record
from tagalign.suggest import Suggestion
from tagalign.vocab import Subject, Vocabulary
from tagalign.vocab.rules import SubjectRules
from tiny_models import tiny_records, tiny_vocab

N_SUBJECTS = 120  # more than limit + the first request, so the doubling path runs


@register_recipe
class HashRanker(Recipe):
    """Ranks every subject by a hash of (text, id): any limit is filled, deterministically."""

    name = "test-hash-ranker"
    defaults: dict[str, Any] = {}

    def fit(self, records: Sequence[Record], *, workdir: Path,
            dev: Sequence[Record] | None = None) -> None:
        pass

    def _suggest(self, records: Sequence[Record], limit: int) -> list[list[Suggestion]]:
        def score(text: str, sid: str) -> float:
            return int(hashlib.sha256(f"{text}|{sid}".encode()).hexdigest()[:8], 16) / 2**32

        out = []
        for r in records:
            ranked = sorted(((score(r.text, s.id), s.id) for s in self.vocab), reverse=True)
            out.append([Suggestion(sid, sc, sid) for sc, sid in ranked[:limit]])
        return out

    def _save_state(self, path: Path) -> None:
        (path / "none.json").write_text("{}", encoding="utf-8")

    def _load_state(self, path: Path) -> None:
        pass


def _big_vocab() -> Vocabulary:
    return Vocabulary(Subject(f"{1000000 + i}-{i % 10}", {"de": f"Thema {i}"})
                      for i in range(N_SUBJECTS))


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("excl")
    overlap = Project.create(root / "overlap", tiny_vocab(), "test-overlap")
    overlap.train(tiny_records(40))
    ranker = Project.create(root / "ranker", _big_vocab(), "test-hash-ranker")
    ranker.train([])
    return {"overlap": overlap, "ranker": ranker}


QUERIES = [Record(id=f"q{i}", title=r.title, abstract=r.abstract)
           for i, r in enumerate(tiny_records(6, seed=3))]


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(data=st.data(), which=st.sampled_from(["overlap", "ranker"]),
       limit=st.integers(1, 30), star=st.booleans())
def test_excluded_subjects_never_come_back_and_the_limit_is_filled(projects, data, which,
                                                                    limit, star):
    project = projects[which]
    ids = project.vocab.ids
    subset = st.lists(st.sampled_from(ids), unique=True, max_size=len(ids))
    if star:  # exclude = "*": only the included subjects remain
        rules = SubjectRules(("*",), tuple(data.draw(subset, "include")))
    else:
        rules = SubjectRules(tuple(data.draw(subset, "exclude")),
                             tuple(data.draw(subset, "include")))
    # per request: ids, some written as GND URIs
    asked = data.draw(subset, "request")
    request = [f"https://d-nb.info/gnd/{i}" if n % 2 else i for n, i in enumerate(asked)]
    served = project.with_serving(ServingSettings(rules=rules))
    got = suggestions(served, QUERIES, limit=limit, exclude=request)
    full = suggestions(project, QUERIES, limit=len(ids))  # everything the recipe ranks
    banned = rules.excluded(project.vocab) | set(asked)
    for row, every in zip(got, full, strict=True):
        returned = [s.id for s in row]
        assert not banned & set(returned)
        allowed = [s.id for s in every if s.id not in banned]
        assert len(returned) == min(limit, len(allowed))
        assert returned == allowed[:limit]  # the recipe's order, holes closed up


def test_rules_are_annifs_exclude_then_include(projects):
    vocab = projects["overlap"].vocab
    assert SubjectRules(("*",), ("4046076-9",)).excluded(vocab) == set(vocab.ids) - {
        "4046076-9"}
    assert SubjectRules(("gnd:4046076-9", "<https://d-nb.info/gnd/4015065-3>")).excluded(
        vocab) == {"4046076-9", "4015065-3"}
    assert SubjectRules(("4046076-9", "nope")).unknown(vocab) == ["nope"]
    assert not SubjectRules() and SubjectRules(("*",))
