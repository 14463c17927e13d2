"""The precision of label-only suggestions (`tagalign.evaluate.label_only`) on hand-made
rankings whose every figure is counted by hand, and which of the hybrid's sources read
labels."""

from __future__ import annotations

import pytest

from tagalign.evaluate.label_only import is_label_only, label_only_precision
from tagalign.records import Record
from tagalign.suggest.sources import SOURCES

READERS = {"labels", "lexical"}


def rec(rid, subjects, lang="de"):
    return Record(id=rid, title=rid, language=lang, subjects=subjects)


DEV = [rec("d1", ["A", "B"]), rec("d2", ["C"], "en"), rec("d3", []), rec("d4", ["D"], "en")]
RANKED = {
    # top 3: A label-only right, X label-only wrong, B learned (+ lexical) right; Y cut
    "d1": [("A", ["lexical"]), ("X", ["labels", "lexical"]), ("A", ["omikuji"]),
           ("B", ["omikuji", "lexical"]), ("Y", ["labels"])],
    # C right from a neighbour source, Z label-only wrong, W names no source (an "other")
    "d2": [("C", ["tfidf_knn"]), ("Z", ["labels"]), ("W", [])],
    "d3": [("A", ["labels"])],  # no gold: not scored
}


def test_label_only_means_every_proposing_source_reads_labels():
    assert is_label_only(["labels"], READERS)
    assert is_label_only(["labels", "lexical"], READERS)
    assert not is_label_only(["omikuji", "lexical"], READERS)
    assert not is_label_only([], READERS)  # no source named: not label-only


def test_figures_overall_and_by_language():
    report = label_only_precision(DEV, RANKED, READERS, k=3)
    assert report["k"] == 3 and report["label_sources"] == ["labels", "lexical"]
    # d1's top 3 (the repeat of A takes no place): A, X label-only; B other
    # d2's top 3: Z label-only; C, W other; d4: no ranking
    assert report["overall"] == {
        "suggestions": 6, "label_only": 3, "share": 0.5,
        "label_only_right": 1, "label_only_precision": pytest.approx(1 / 3),
        "other": 3, "other_right": 2, "other_precision": pytest.approx(2 / 3)}
    de, en = report["by_language"]["de"], report["by_language"]["en"]
    assert (de["label_only"], de["label_only_right"], de["other"], de["other_right"]) == (
        2, 1, 1, 1)
    assert (en["suggestions"], en["label_only"], en["label_only_precision"]) == (3, 1, 0.0)
    assert en["other_precision"] == 0.5


def test_the_cut_and_empty_groups():
    top1 = label_only_precision(DEV, RANKED, READERS, k=1)["overall"]
    assert (top1["suggestions"], top1["label_only"], top1["label_only_right"],
            top1["other"], top1["other_right"]) == (2, 1, 1, 1, 1)
    none = label_only_precision(DEV, {}, READERS)["overall"]
    assert none["suggestions"] == 0 and none["share"] is None
    assert none["label_only_precision"] is None and none["other_precision"] is None
    with pytest.raises(ValueError, match="k must be at least 1"):
        label_only_precision(DEV, RANKED, READERS, k=0)


def test_the_hybrids_label_reading_sources():
    reading = {name for name in ("omikuji", "tfidf_knn", "emb_knn", "labels", "lexical")
               if SOURCES[name].reads_labels}
    assert reading == READERS
