"""`evaluate`: the task's report — overall and by language, record type and both."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from tagalign.evaluate.metrics import DEFAULT_KS, group_metrics
from tagalign.records import Record


def evaluate(records: Iterable[Record], predictions: Mapping[str, Sequence[str]],
             ks: Sequence[int] = DEFAULT_KS) -> dict:
    """Score rankings (``{record id: [subject ids best first]}``) against gold records.

    Returns ``{"ks", "overall", "by_language", "by_type", "by_type_language",
    "missing_predictions", "no_gold"}``; a record without a prediction counts as an
    empty ranking.
    """
    ks = sorted(int(k) for k in ks)
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    groups: dict[str, dict[str, tuple[list, list]]] = {
        "by_language": defaultdict(lambda: ([], [])),
        "by_type": defaultdict(lambda: ([], [])),
        "by_type_language": defaultdict(lambda: ([], [])),
    }
    gold_all: list[set[str]] = []
    rank_all: list[list[str]] = []
    missing = no_gold = 0
    for rec in records:
        if not rec.subjects:
            no_gold += 1
            continue
        ranking = predictions.get(rec.id)
        if ranking is None:
            missing += 1
            ranking = []
        gold = set(rec.subjects)
        ranking = list(ranking)
        gold_all.append(gold)
        rank_all.append(ranking)
        lang = rec.language or "unknown"
        rtype = rec.type or "unknown"
        for key, name in (("by_language", lang), ("by_type", rtype),
                          ("by_type_language", f"{rtype}/{lang}")):
            g, r = groups[key][name]
            g.append(gold)
            r.append(ranking)
    report: dict = {"ks": ks, "overall": group_metrics(gold_all, rank_all, ks)}
    for key, table in groups.items():
        report[key] = {name: group_metrics(g, r, ks) for name, (g, r) in sorted(table.items())}
    report["missing_predictions"] = missing
    report["no_gold"] = no_gold
    return report
