"""The precision of label-only suggestions (issue 66): how much of a top k comes from the
sources that read labels alone, and how often it is right.

A *label-reading* source proposes a heading by reading its labels, so it needs no training
record carrying the heading (`tagalign.suggest.sources.Source.reads_labels`: the hybrid's
label index ``labels`` and lexical matcher ``lexical``); the learned sources (Omikuji's
label trees, the record neighbours ``tfidf_knn`` and ``emb_knn``) propose only headings
that training records carry. A suggestion is **label-only** when every source that
proposed it as a candidate is a label-reading one (the sources its reasons name,
``reasons["sources"]``, at least one: a suggestion naming none is counted with the
others). One a learned source proposed too is not label-only, whatever the label-reading
sources said of it.

Over the top ``k`` (default 5) of each scored record (one with gold subjects; a ranking is
deduplicated, a subject's first place counts, as everywhere), overall and by language:

* ``suggestions`` — the (record, subject) pairs of the top k; ``label_only`` — those that
  are label-only, ``share`` = label_only / suggestions;
* ``label_only_precision`` = the label-only pairs whose subject is in the record's gold /
  label_only; ``other_precision`` the same for the other pairs of the top k (None where
  there are none), the figure beside it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence

from tagalign.evaluate.evaluator import UNKNOWN
from tagalign.records import Record

#: the cut-off the issue names (the top 5)
LABEL_ONLY_K = 5

#: one ranked suggestion: its subject id and the sources that proposed it
Ranked = tuple[str, Collection[str]]


def is_label_only(sources: Collection[str], label_sources: Collection[str]) -> bool:
    """Whether a suggestion proposed by ``sources`` is label-only (the module docstring)."""
    return bool(sources) and all(s in label_sources for s in sources)


def _figures(t: Counter[str]) -> dict:
    def ratio(a: str, b: str) -> float | None:
        return t[a] / t[b] if t[b] else None

    return {"suggestions": t["n"], "label_only": t["label"], "share": ratio("label", "n"),
            "label_only_right": t["label_right"],
            "label_only_precision": ratio("label_right", "label"),
            "other": t["other"], "other_right": t["other_right"],
            "other_precision": ratio("other_right", "other")}


def label_only_precision(records: Iterable[Record], ranked: Mapping[str, Sequence[Ranked]],
                         label_sources: Collection[str], k: int = LABEL_ONLY_K) -> dict:
    """The label-only figures of the top ``k`` (the module docstring): ``{"k",
    "label_sources", "overall": figures, "by_language": {lang: figures}}``.

    ``ranked``: record id → its ranking as (subject id, proposing sources), best first (a
    record absent from it has an empty ranking); ``label_sources``: the names of the
    label-reading sources."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    tallies: dict[str, Counter[str]] = defaultdict(Counter)
    for rec in records:
        if not rec.subjects:
            continue
        gold, seen = set(rec.subjects), set()
        for sid, sources in ranked.get(rec.id, ()):
            if sid in seen:
                continue
            seen.add(sid)
            kind = "label" if is_label_only(sources, label_sources) else "other"
            for group in ("", rec.language or UNKNOWN):
                tallies[group]["n"] += 1
                tallies[group][kind] += 1
                tallies[group][kind + "_right"] += sid in gold
            if len(seen) == k:
                break
    return {"k": k, "label_sources": sorted(label_sources),
            "overall": _figures(tallies[""]),
            "by_language": {lang: _figures(t) for lang, t in sorted(tallies.items()) if lang}}
