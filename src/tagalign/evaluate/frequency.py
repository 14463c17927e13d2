"""Recall on the long tail: gold subjects bucketed by how many training records carry them.

A subject's *train count* is the number of training records whose gold carries it (a
record counts once however often it lists the subject). Each gold subject of each scored
record falls in one bucket by its count::

    unseen   count = 0                  (no training record carries it)
    rare     1 ≤ count < common_min     (default 1–4)
    common   count ≥ common_min         (default ≥ 5)

Per bucket (overall and by language) the report gives, with G the gold subjects of the
bucket over all records of the group (each (record, subject) pair once):

* ``gold`` = |G|, ``records`` = the records with at least one subject in G,
* ``share`` = |G| / all gold subjects of the group,
* ``recall@k`` = |{(r, s) ∈ G : s in the top k of r's ranking}| / |G|: micro recall, so a
  bucket's figure is its subjects' own, not diluted by a record's other gold subjects
  (the issue-66 table is this). An empty bucket's recall is None (null in JSON).

Rankings are deduplicated before the cut as everywhere (`tagalign.evaluate.metrics`); a
record with no prediction counts as an empty ranking. `subject_recall` gives the same
figures for an arbitrary set of subjects (the simulated-new protocol: recall of exactly
the subjects withheld from training).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence

from tagalign.evaluate.evaluator import UNKNOWN
from tagalign.evaluate.metrics import DEFAULT_KS, check_ks, dedupe
from tagalign.records import Record

BUCKETS = ("unseen", "rare", "common")
#: the train count from which a subject is common (rare: 1 up to this, exclusive)
COMMON_MIN = 5


def subject_counts(records: Iterable[Record]) -> Counter[str]:
    """Per subject id, how many of ``records`` carry it in their gold."""
    counts: Counter[str] = Counter()
    for rec in records:
        counts.update(set(rec.subjects))
    return counts


def bucket_of(count: int, common_min: int = COMMON_MIN) -> str:
    """``"unseen"`` (0), ``"rare"`` (1 … common_min − 1) or ``"common"`` (≥ common_min)."""
    if common_min < 2:
        raise ValueError(f"common_min must be at least 2 (rare: 1 … common_min - 1), "
                         f"got {common_min}")
    return "unseen" if count <= 0 else "rare" if count < common_min else "common"


class _Tally:
    """Gold pairs, records and hits by cut-off of one bucket of one group."""

    def __init__(self, ks: Sequence[int]):
        self.gold = 0
        self.records = 0
        self.found = dict.fromkeys(ks, 0)

    def add(self, subjects: set[str], ranking: Sequence[str]) -> None:
        if not subjects:
            return
        self.gold += len(subjects)
        self.records += 1
        for k in self.found:
            self.found[k] += len(subjects.intersection(ranking[:k]))

    def figures(self, total_gold: int) -> dict:
        share = self.gold / total_gold if total_gold else 0.0
        return {"gold": self.gold, "records": self.records, "share": share,
                **{f"recall@{k}": (found / self.gold if self.gold else None)
                   for k, found in self.found.items()}}


def _scored(records: Iterable[Record], predictions: Mapping[str, Sequence[str]],
            depth: int) -> Iterable[tuple[str, set[str], list[str]]]:
    """(language, gold set, deduplicated ranking cut at depth) of each record with gold."""
    for rec in records:
        if rec.subjects:
            yield (rec.language or UNKNOWN, set(rec.subjects),
                   dedupe(predictions.get(rec.id, ()))[:depth])


def _grouped(rows: Iterable[tuple[str, set[str], list[str]]], ks: list[int],
             parts: Sequence[str], part_of) -> dict:
    """``{"overall": {part: figures}, "by_language": {lang: {part: figures}}}``, each
    record's gold split into ``parts`` by ``part_of(subject)`` (None: in no part)."""
    tallies: dict[str, dict[str, _Tally]] = defaultdict(
        lambda: {p: _Tally(ks) for p in parts})
    totals: Counter[str] = Counter()
    for lang, gold, ranking in rows:
        split: dict[str, set[str]] = {p: set() for p in parts}
        for sid in gold:
            part = part_of(sid)
            if part is not None:
                split[part].add(sid)
        for group in ("", lang):
            totals[group] += len(gold)
            for part, subjects in split.items():
                tallies[group][part].add(subjects, ranking)
    overall = tallies[""]
    return {"overall": {p: t.figures(totals[""]) for p, t in overall.items()},
            "by_language": {lang: {p: t.figures(totals[lang]) for p, t in tallies[lang].items()}
                            for lang in sorted(g for g in tallies if g)}}


def frequency_report(records: Iterable[Record], predictions: Mapping[str, Sequence[str]],
                     counts: Mapping[str, int], ks: Sequence[int] = DEFAULT_KS,
                     common_min: int = COMMON_MIN) -> dict:
    """Recall@k by train-count bucket, overall and by language (the module docstring).

    ``counts``: subject id → training records carrying it (`subject_counts`, or counts a
    caller made itself; a subject absent from it is unseen). Returns ``{"ks",
    "common_min", "overall": {bucket: figures}, "by_language": {lang: {bucket: figures}}}``,
    figures = ``{"gold", "records", "share", "recall@k" …}``.
    """
    ks = check_ks(ks)
    bucket_of(0, common_min)  # the threshold is checked before any work

    def part_of(sid: str) -> str:
        return bucket_of(counts.get(sid, 0), common_min)

    grouped = _grouped(_scored(records, predictions, max(ks)), ks, BUCKETS, part_of)
    return {"ks": ks, "common_min": common_min, **grouped}


def subject_recall(records: Iterable[Record], predictions: Mapping[str, Sequence[str]],
                   subjects: Collection[str], ks: Sequence[int] = DEFAULT_KS) -> dict:
    """Micro recall@k of exactly ``subjects`` among the gold: ``{"ks", "overall": figures,
    "by_language": {lang: figures}}`` with the figures of `frequency_report` (``share``:
    of all the group's gold subjects)."""
    ks = check_ks(ks)
    chosen = set(subjects)
    grouped = _grouped(_scored(records, predictions, max(ks)), ks, ("subjects",),
                       lambda sid: "subjects" if sid in chosen else None)
    return {"ks": ks, "overall": grouped["overall"]["subjects"],
            "by_language": {lang: parts["subjects"]
                            for lang, parts in grouped["by_language"].items()}}
