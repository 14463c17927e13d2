"""Lexical label matching: subject labels found in the title/abstract after stemming.

Labels (preferred and alternate, German and English) are stemmed with their language's
Snowball stemmer and stop words are dropped on both sides, so "Geschichte der Philosophie"
matches "…zur Geschichte der Philosophie…". Like Annif's MLLM, but the fusion ranker, not
hand rules, decides what a match is worth.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from tagalign.io import read_json, write_json_atomic
from tagalign.suggest.sources.base import Batch, Candidates, Source, register_source
from tagalign.text.analyzer import _STOP


@register_source
class LabelMatcher(Source):
    name = "lexical"
    features = ["lex_count", "lex_in_title", "lex_ntokens", "lex_first", "lex_pref",
                "lex_ambiguity"]

    def __init__(self, max_ngram: int = 5, **params: Any):
        super().__init__(max_ngram=max_ngram, **params)
        self.max_ngram = max_ngram
        # key "lang|tok tok" -> list of (subject position, is_pref)
        self.table_: dict[str, list[tuple[int, int]]] = {}
        self._prefixes: set[str] = set()  # proper prefixes of keys: stop scanning early

    def fit(self, ctx: Any) -> None:
        analyzer, vocab = ctx.analyzer, ctx.vocab
        table: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for pos, subj in enumerate(vocab.subjects):
            seen = set()
            for lang in ("de", "en"):
                labels = [(subj.labels[lang], 1)] if lang in subj.labels else []
                labels += [(a, 0) for a in subj.alt_labels.get(lang, [])]
                stop = _STOP[lang]
                for label, pref in labels:
                    toks = [t for t in analyzer.words(label) if t not in stop]
                    if not toks or len(toks) > self.max_ngram:
                        continue
                    key = lang + "|" + " ".join(analyzer.stem(toks, lang))
                    if key not in seen:
                        seen.add(key)
                        table[key].append((pos, pref))
        self.table_ = dict(table)
        self._index_prefixes()

    def _index_prefixes(self) -> None:
        prefixes = set()
        for key in self.table_:
            parts = key.split(" ")
            for m in range(1, len(parts)):
                prefixes.add(" ".join(parts[:m]))
        self._prefixes = prefixes

    def _label_of(self, key: str) -> str:
        return key.split("|", 1)[1]

    def candidates(self, batch: Batch) -> Candidates:
        rows, cols, feats = [], [], []
        matches: list[dict[int, str]] = []
        batch.evidence[self.name] = matches
        for r, (toks, ttoks, lang) in enumerate(zip(batch.tokens, batch.title_tokens,
                                                    batch.languages, strict=True)):
            found: dict[int, list[float]] = {}
            keys: dict[int, str] = {}
            n = len(toks)
            title_set = set()
            for i in range(len(ttoks)):
                for m in range(1, self.max_ngram + 1):
                    if i + m > len(ttoks):
                        break
                    title_set.add(" ".join(ttoks[i:i + m]))
            prefix = (lang if lang in ("de", "en") else "de") + "|"
            for i in range(n):
                for m in range(1, self.max_ngram + 1):
                    if i + m > n:
                        break
                    gram = " ".join(toks[i:i + m])
                    key = prefix + gram
                    hits = self.table_.get(key)
                    if not hits:
                        if key not in self._prefixes:
                            break
                        continue
                    for pos, pref in hits:
                        f = found.get(pos)
                        if f is None:
                            found[pos] = [1.0, float(gram in title_set), float(m), i / max(n, 1),
                                          float(pref), float(len(hits))]
                            keys[pos] = gram
                        else:
                            f[0] += 1.0
                            f[4] = max(f[4], float(pref))
            for pos, f in found.items():
                rows.append(r)
                cols.append(pos)
                feats.append(f)
            matches.append(keys)
        return Candidates.from_lists(rows, cols, feats, self.features)

    def save(self, path: Path) -> None:
        write_json_atomic(path / "lexical.json", {"max_ngram": self.max_ngram,
                                                  "table": self.table_})

    def load_state(self, path: Path, ctx: Any) -> None:
        data = read_json(path / "lexical.json")
        self.table_ = {k: [tuple(x) for x in v] for k, v in data["table"].items()}
        self._index_prefixes()
