"""`SubjectEvaluator`: the task's report — overall and by language, record type and both.

Like a sentence-transformers evaluator, it is built once from the gold data and called
with what to score (here: rankings ``{record id: [subject ids best first]}``), returning a
dict of named metrics::

    evaluator = SubjectEvaluator(read_records("dev.jsonl.gz"))
    report = evaluator(predictions)
    report["overall"]["avg_recall"]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tagalign.evaluate.metrics import DEFAULT_KS, check_ks, hits_matrix, metrics_from_hits
from tagalign.records import Record

UNKNOWN = "unknown"
BREAKDOWNS = ("by_language", "by_type", "by_type_language")


class SubjectEvaluator:
    """Scores rankings against gold records with the shared task's metrics.

    The report is exactly ``{"ks", "overall", "by_language", "by_type",
    "by_type_language", "missing_predictions"}``; each group holds ``n`` and the metrics
    of `tagalign.evaluate.metrics` (groups sorted by name, ``"Book/de"`` = type/language).

    * Records without gold subjects cannot be scored (R@k is undefined); they are left
      out, as the task's script does, and counted in ``no_gold``.
    * A record with no prediction counts as an empty ranking (scores 0) and is counted in
      the report's ``missing_predictions``.
    * A missing language or type is grouped as ``"unknown"``.
    """

    primary_metric = "avg_recall"
    greater_is_better = True

    def __init__(self, records: Iterable[Record], ks: Sequence[int] = DEFAULT_KS):
        self.ks = check_ks(ks)
        self.ids: list[str] = []
        self.gold: list[set[str]] = []
        self.no_gold = 0
        self._all_ids: set[str] = set()
        groups: dict[str, dict[str, list[int]]] = {key: defaultdict(list) for key in BREAKDOWNS}
        for rec in records:
            self._all_ids.add(rec.id)
            if not rec.subjects:
                self.no_gold += 1
                continue
            i = len(self.ids)
            self.ids.append(rec.id)
            self.gold.append(set(rec.subjects))
            lang, rtype = rec.language or UNKNOWN, rec.type or UNKNOWN
            groups["by_language"][lang].append(i)
            groups["by_type"][rtype].append(i)
            groups["by_type_language"][f"{rtype}/{lang}"].append(i)
        self.groups = {key: {name: np.array(rows, dtype=np.int64)
                             for name, rows in sorted(table.items())}
                       for key, table in groups.items()}
        self.sizes = np.array([len(g) for g in self.gold], dtype=np.float64)

    def __len__(self) -> int:
        """Number of scored records (those with gold subjects)."""
        return len(self.ids)

    def __call__(self, predictions: Mapping[str, Sequence[str]]) -> dict:
        rankings = []
        missing = 0
        for rid in self.ids:
            ranking = predictions.get(rid)
            if ranking is None:
                missing += 1
                ranking = ()
            rankings.append(ranking)
        hits = hits_matrix(self.gold, rankings, max(self.ks))
        report: dict = {"ks": list(self.ks),
                        "overall": metrics_from_hits(hits, self.sizes, self.ks)}
        for key, table in self.groups.items():
            report[key] = {name: metrics_from_hits(hits[rows], self.sizes[rows], self.ks)
                           for name, rows in table.items()}
        report["missing_predictions"] = missing
        return report

    def unknown_ids(self, predictions: Mapping[str, Sequence[str]]) -> int:
        """How many predicted record ids match no gold record at all (a wrong file?)."""
        return len(set(predictions) - self._all_ids)


def evaluate(records: Iterable[Record], predictions: Mapping[str, Sequence[str]],
             ks: Sequence[int] = DEFAULT_KS) -> dict:
    """One-shot `SubjectEvaluator`: ``SubjectEvaluator(records, ks)(predictions)``."""
    return SubjectEvaluator(records, ks)(predictions)
