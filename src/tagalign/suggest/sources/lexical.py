"""Lexical label matching: subject labels found in the title/abstract after stemming.

Labels (preferred and alternate, German and English) are stemmed with their language's
Snowball stemmer and stop words are dropped on both sides, so "Geschichte der Philosophie"
matches "…zur Geschichte der Philosophie…". Like Annif's MLLM, but the fusion ranker, not
hand rules, decides what a match is worth.

Fitting also scans the training records once and counts, per subject, in how many texts one
of its labels was found and in how many of those it was a gold subject: ``lex_prec``, the
smoothed share (gold + 1) / (found + 2), says whether a label found in a text is usually a
subject of it ("Geschichte" is found everywhere and rarely assigned; "Epos" is assigned
when found). Issue 18: how often a label occurs in text at all. NaN for a subject never
found, and for models saved before the counts existed. The counts come from a seeded
sample of at most ``count_max_records`` training records (issue 48: the scan of 988,000
records took 657 s of a 1M training; a share is estimated as well from 200,000).

With ``mine_min_support`` > 0, fitting also adds English label variants mined from the
English training records (`tagalign.suggest.sources.mined`, issue 33): phrases that stand
for a subject in cataloguers' answers. Their matches have ``lex_pref`` -2.
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import scipy.sparse as sp

from tagalign.io import load_npy, save_npy_atomic, write_bytes_atomic
from tagalign.params import Fraction, NonNegative, Positive
from tagalign.runtime import ProgressCallback
from tagalign.sampling import sample_indices
from tagalign.suggest.sources.base import (
    Batch,
    Candidates,
    FitContext,
    NewHeadings,
    Source,
    SourceConfig,
    register_source,
)
from tagalign.suggest.sources.loose import (
    COMPOUND,
    NEAR,
    NEAR_SLACK,
    SCATTERED,
    CompoundIndex,
    ScatteredIndex,
    compound_index,
    scattered_index,
    window,
)
from tagalign.suggest.sources.memory import RecordMemory
from tagalign.suggest.sources.mined import mine_label_variants, record_grams
from tagalign.suggest.sources.spelling import Spellings, spelling, spelling_index
from tagalign.text import Analyzer
from tagalign.text.analyzer import _STOP
from tagalign.vocab import Subject, Vocabulary

log = logging.getLogger(__name__)

#: ``lex_pref`` of a match by a mined label variant (1 preferred, 0 alternative, -1 German
#: label in an English text)
MINED = -2
#: the matching options a trained matcher can change (`LabelMatcher.set_matching`)
MATCHING_OPTIONS = ("prefer_exact", "scattered", "scattered_slack", "compounds")
#: the label table's progress is reported every this many subjects
LABELS_CHUNK = 10_000


@dataclass(frozen=True)
class LabelMatcherConfig(SourceConfig):
    """Labels of at most ``max_ngram`` words are looked for."""

    max_ngram: Positive = 5
    #: subjects without an English label are also looked for in English texts under
    #: their German labels, stemmed as English (names of places, people, bodies and many
    #: technical terms are written alike); such matches have ``lex_pref`` -1
    cross_language: bool = True
    #: English label variants mined from English training records (0: none;
    #: `tagalign.suggest.sources.mined`); by default only for subjects without an English
    #: label
    mine_min_support: NonNegative = 0
    mine_min_precision: Fraction = 0.5
    mine_all_subjects: bool = False
    #: ``lex_prec``'s counts scan a seeded sample (``seed``) of at most this many training
    #: records (None: all; `tagalign.sampling.sample_indices`)
    count_max_records: Positive | None = 200_000
    seed: NonNegative = 13
    #: a key (a stemmed label) naming more subjects than this is left out of the table
    #: (None: none left out): it cannot tell them apart, and each record that holds it got
    #: them all as candidates. Issue 48: a 1.5M-heading GND names ~6,500 works "Gedichte"
    #: or "Reise" and ~80 persons by each surname alone; the 205k subject headings' widest
    #: key names 167 ("Dampflokomotive Baureihe …" without its numbers), so every model of
    #: the subject headings is unchanged
    max_key_subjects: Positive | None = 200
    #: a key naming subjects spelt differently ("Schaden", "schade" and "Schade" stem
    #: alike) is matched by the text's words that spell one of them exactly (umlauts
    #: folded) as that one's alone (`tagalign.suggest.sources.spelling`)
    prefer_exact: bool = False
    #: a label of 2 or more words is also found when its stems are all in the text, in
    #: any order and apart (``lex_pref`` -4 within the label's length + 2 tokens, -5
    #: further; `tagalign.suggest.sources.loose`)
    scattered: bool = False
    #: with ``scattered``: a label's stems count only within a window of the label's length
    #: + this many tokens (None: anywhere in the text, ``lex_pref`` -5 beyond the window).
    #: Measured on 5,000 dev records: within the window 2.6 candidates a record at a
    #: precision of 0.015; beyond it 19.5 at 0.004 (`benchmarks/quality/lexical_reach.py`)
    scattered_slack: NonNegative | None = NEAR_SLACK
    #: a one-word German label made of two label words (``Fachwerkbau``: ``Fachwerk`` +
    #: ``Bau``) is also found in a German text holding both (``lex_pref`` -3)
    compounds: bool = False


@register_source
class LabelMatcher(Source):
    name = "lexical"
    reads_labels = True
    features = ["lex_count", "lex_in_title", "lex_ntokens", "lex_first", "lex_pref",
                "lex_ambiguity", "lex_prec"]
    config_class = LabelMatcherConfig
    config: LabelMatcherConfig

    def __init__(self, config: LabelMatcherConfig | None = None, **settings: Any):
        super().__init__(config, **settings)
        # key "lang|tok tok" -> list of (subject position, is_pref)
        self.table_: dict[str, list[tuple[int, int]]] = {}
        self._grams: dict[str, dict[str, list[tuple[int, int]]]] = {}
        self._prefixes: dict[str, set[str]] = {}  # proper prefixes of labels: stop early
        self._spellings: Spellings = {}  # with prefer_exact: keys told apart by spelling
        self._scattered: dict[str, ScatteredIndex] = {}  # per language, with scattered
        self._compounds: CompoundIndex = {}  # German, with compounds
        #: per subject: training texts where a label was found, and of those, gold ones
        self.found_: np.ndarray | None = None
        self.gold_: np.ndarray | None = None
        self._prec: np.ndarray | None = None
        self.vocab_: Vocabulary | None = None
        self.analyzer_: Analyzer | None = None

    def fit(self, ctx: FitContext) -> None:
        analyzer, vocab = ctx.analyzer, ctx.vocab
        self.vocab_, self.analyzer_ = vocab, analyzer
        table: dict[str, list[tuple[int, int]]] = defaultdict(list)
        n_subjects = len(vocab.subjects)
        for pos, subj in enumerate(vocab.subjects):
            if ctx.progress is not None and pos % LABELS_CHUNK == 0:
                ctx.progress("lexical: labels", pos, n_subjects)
            for key, pref in self._subject_keys(subj, analyzer):
                table[key].append((pos, pref))
        if ctx.progress is not None:
            ctx.progress("lexical: labels", n_subjects, n_subjects)
        if self.config.mine_min_support and ctx.tokens is not None:
            self._add_mined(table, ctx)
        self.table_ = self._narrow(table)
        self._index_prefixes()
        if ctx.tokens is not None:  # training records given: count (a seeded sample)
            batch, Y = self._count_sample(ctx)
            self._count_found(batch, Y, len(vocab), progress=ctx.progress)

    def _subject_keys(self, subj: Subject, analyzer: Analyzer) -> list[tuple[str, int]]:
        """The table's keys of one subject's labels (``lang|stemmed words``), each once,
        with the kind of label (1 preferred, 0 alternative, -1 German in English texts)."""
        out: list[tuple[str, int]] = []
        seen = set()
        for key, pref, _ in self._label_forms(subj, analyzer):
            if key not in seen:
                seen.add(key)
                out.append((key, pref))
        return out

    def _label_forms(self, subj: Subject, analyzer: Analyzer) -> list[tuple[str, int, str]]:
        """(key, kind of label, `spelling`) of each label of ``subj`` the table keys."""
        out: list[tuple[str, int, str]] = []

        def add(label: str, stemmed_as: str, pref: int) -> None:
            toks = [t for t in analyzer.words(label) if t not in _STOP[stemmed_as]]
            if toks and len(toks) <= self.config.max_ngram:
                out.append((stemmed_as + "|" + " ".join(analyzer.stem(toks, stemmed_as)),
                            pref, spelling(toks)))

        for lang in ("de", "en"):
            if lang in subj.labels:
                add(subj.labels[lang], lang, 1)
            for alt in subj.alt_labels.get(lang, []):
                add(alt, lang, 0)
        if self.config.cross_language and "en" not in subj.labels:
            for label in [subj.labels.get("de", ""), *subj.alt_labels.get("de", [])]:
                add(label or "", "en", -1)
        return out

    def take_headings(self, headings: NewHeadings, ctx: FitContext) -> None:
        """The labels of the new and the relabelled headings into the table (a relabelled
        one's old labels out; its mined variants stay); their label counts start at none
        (``lex_prec`` NaN, as for a heading never found in training)."""
        self.bind(ctx.vocab)
        analyzer = self.analyzer_ or ctx.analyzer
        changed = set(headings.relabelled)
        table: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for key, hits in self.table_.items():
            kept = [h for h in hits if h[0] not in changed or h[1] == MINED]
            if kept:
                table[key] = kept
        for pos in [*sorted(changed), *headings.added]:
            for key, pref in self._subject_keys(ctx.vocab.subjects[pos], analyzer):
                table[key].append((pos, pref))
        self.table_ = self._narrow(table)
        self._index_prefixes()
        if self.found_ is not None and self.gold_ is not None:
            n, old = len(ctx.vocab), len(self.found_)
            found = np.concatenate([self.found_, np.zeros(n - old, np.float32)])
            gold = np.concatenate([self.gold_, np.zeros(n - old, np.float32)])
            found[sorted(changed)] = gold[sorted(changed)] = 0.0
            self.found_, self.gold_ = found, gold
            self._set_precision()

    def bind(self, vocab: Vocabulary) -> None:
        self.vocab_ = vocab

    def _narrow(self, table: dict[str, list[tuple[int, int]]]
                ) -> dict[str, list[tuple[int, int]]]:
        """``table`` without the keys naming more than ``max_key_subjects`` subjects."""
        cap = self.config.max_key_subjects
        kept = {key: hits for key, hits in table.items() if cap is None or len(hits) <= cap}
        if len(kept) < len(table):
            log.info("lexical: %d of %d labels name more than %d subjects each and are not "
                     "looked for (max_key_subjects)", len(table) - len(kept), len(table), cap)
        return kept

    def _count_sample(self, ctx: FitContext) -> tuple[Batch, Any]:
        """The training records ``lex_prec`` counts over and their gold rows: all, or a
        seeded sample of ``count_max_records``."""
        tokens, memory, Y = _training(ctx)
        n, langs = len(tokens), list(memory.languages)
        keep = sample_indices(n, self.config.count_max_records, self.config.seed)
        if len(keep) == n:
            return Batch(ctx.records, langs, tokens, [[] for _ in tokens]), Y
        log.info("lexical: label counts from a seeded sample of %d of %d records "
                 "(lexical_count_max_records)", len(keep), n)
        pick = keep.tolist()
        records = [ctx.records[i] for i in pick] if ctx.records else ctx.records
        return Batch(records, [langs[i] for i in pick], [tokens[i] for i in pick],
                     [[] for _ in pick]), Y[keep]

    def _add_mined(self, table: dict[str, list[tuple[int, int]]], ctx: FitContext) -> None:
        """Label variants mined from the English records of ``ctx`` into ``table``."""
        tokens, memory, Y = _training(ctx)
        english = [i for i, lg in enumerate(memory.languages) if lg == "en"]
        if not english:
            return
        mask = None if self.config.mine_all_subjects else np.array(
            ["en" not in s.labels for s in ctx.vocab.subjects])
        mined = mine_label_variants([tokens[i] for i in english], Y[english],
                                    min_support=self.config.mine_min_support,
                                    min_precision=self.config.mine_min_precision, subjects=mask)
        for gram, hits in mined.items():
            entry = table.setdefault("en|" + gram, [])
            have = {pos for pos, _ in entry}
            entry.extend((pos, MINED) for pos, _ in hits if pos not in have)

    def _count_found(self, batch: Batch, Y: Any, n_subjects: int, chunk: int = 2000,
                     progress: ProgressCallback | None = None) -> None:
        """`found_` / `gold_` over the training records of ``batch`` (gold: rows of ``Y``),
        scanned ``chunk`` records at a time: the scan's Python lists for all 90k training
        records at once would hold about a gigabyte. ``progress``: the records scanned,
        a chunk at a time, as phase ``lexical: label counts``."""
        if progress is not None:
            progress("lexical: label counts", 0, len(batch))
        found = np.zeros(n_subjects, np.float32)
        gold = np.zeros(n_subjects, np.float32)
        for start in range(0, len(batch), chunk):
            stop = min(start + chunk, len(batch))
            c = self.candidates(Batch(batch.records[start:stop], batch.languages[start:stop],
                                      batch.tokens[start:stop],
                                      batch.title_tokens[start:stop]))
            found += np.bincount(c.cols, minlength=n_subjects)
            hit = np.asarray(Y[c.rows + start, c.cols]).ravel() > 0
            gold += np.bincount(c.cols[hit], minlength=n_subjects)
            if progress is not None:
                progress("lexical: label counts", stop, len(batch))
        self.found_, self.gold_ = found, gold
        self._set_precision()

    def _set_precision(self) -> None:
        if self.found_ is None or self.gold_ is None:  # set together
            self._prec = None
            return
        self._prec = np.where(self.found_ > 0, (self.gold_ + 1) / (self.found_ + 2),
                              np.nan).astype(np.float32)

    def _index_prefixes(self) -> None:
        """Per language: stemmed label → its subjects, and the proper prefixes of labels
        (a scan stops at an n-gram that is neither). Keyed by language so the scan looks
        grams up without building ``lang|gram`` strings (the saved table keeps its keys)."""
        grams: dict[str, dict[str, list[tuple[int, int]]]] = {}
        prefixes: dict[str, set[str]] = {}
        for key, hits in self.table_.items():
            lang, gram = key.split("|", 1)
            grams.setdefault(lang, {})[gram] = hits
            parts = gram.split(" ")
            known = prefixes.setdefault(lang, set())
            for m in range(1, len(parts)):
                known.add(" ".join(parts[:m]))
        self._grams, self._prefixes = grams, prefixes
        vocab, analyzer = self.vocab_, self.analyzer_
        self._spellings = {} if not self.config.prefer_exact or vocab is None or \
            analyzer is None else spelling_index(self.table_, lambda pos: [
                (k, sp) for k, _, sp in self._label_forms(vocab.subjects[pos], analyzer)],
                MINED)
        self._scattered = {lang: scattered_index(g) for lang, g in grams.items()} \
            if self.config.scattered else {}
        self._compounds = {} if not self.config.compounds or vocab is None or \
            analyzer is None else compound_index(
                (label for subj in vocab.subjects for label in
                 [subj.labels.get("de", ""), *subj.alt_labels.get("de", [])]),
                set(grams.get("de", {})), analyzer)

    def candidates(self, batch: Batch) -> Candidates:
        # the scan is plain Python over each record's tokens (n-grams grown one token at a
        # time, one dict lookup each): the hybrid's costliest source per record before
        # issue 23 joined slices and prefixed keys for every lookup
        rows, cols, feats = [], [], []
        prec = self._prec
        matches: list[dict[int, str]] = []
        batch.evidence[self.name] = matches
        max_m = self.config.max_ngram
        for r, (toks, ttoks, lang) in enumerate(zip(batch.tokens, batch.title_tokens,
                                                    batch.languages, strict=True)):
            lg = lang if lang in ("de", "en") else "de"
            grams = self._grams.get(lg, {})
            prefixes = self._prefixes.get(lg, set())
            spelt = self._spellings.get(lg, {})
            words: list[str] | None = None  # the text's words, once a spelling matters
            found: dict[int, list[float]] = {}
            keys: dict[int, str] = {}
            n = len(toks)
            title_set = record_grams(ttoks, max_m)
            for i in range(n):
                gram = toks[i]
                m = 1
                while True:
                    hits = grams.get(gram)
                    if hits and gram in spelt:
                        if words is None:
                            words = self._words(batch, r, lg)
                        if len(words) == n:  # aligned with the tokens (records given)
                            hits = spelt[gram].get(spelling(words[i:i + m]), hits)
                    if hits:
                        in_title, nhits, first = float(gram in title_set), float(len(hits)), \
                            i / max(n, 1)
                        for pos, pref in hits:
                            f = found.get(pos)
                            if f is None:
                                found[pos] = [1.0, in_title, float(m), first, float(pref), nhits,
                                              float("nan") if prec is None else prec[pos]]
                                keys[pos] = gram
                            else:
                                f[0] += 1.0
                                if pref > f[4]:  # the evidence names the best kind of label
                                    f[4] = float(pref)
                                    keys[pos] = gram
                    elif gram not in prefixes:
                        break
                    m += 1
                    if m > max_m or i + m > n:
                        break
                    gram = gram + " " + toks[i + m - 1]
            if self._scattered or self._compounds:
                self._loose(toks, title_set, lg, grams, found, keys)
            for pos, f in found.items():
                rows.append(r)
                cols.append(pos)
                feats.append(f)
            matches.append(keys)
        return Candidates.from_lists(rows, cols, feats, self.features)

    def _loose(self, toks: list[str], title: set[str], lang: str,
               grams: dict[str, list[tuple[int, int]]], found: dict[int, list[float]],
               keys: dict[int, str]) -> None:
        """Into ``found``/``keys``: the subjects of the keys whose stems ``toks`` holds
        scattered, and of the German compounds whose two parts it holds
        (`tagalign.suggest.sources.loose`), where no label of theirs stood in the text."""
        prec, n = self._prec, len(toks)
        have = set(toks)
        positions: dict[str, list[int]] | None = None
        hits_of: list[tuple[str, int, float, float, float]] = []  # key, kind, title,
        # its number of stems, where it begins
        scattered = self._scattered.get(lang, {})
        slack = self.config.scattered_slack
        far = slack is None  # scattered anywhere, beyond the window too
        if slack is None:
            slack = NEAR_SLACK
        for tok in have:
            for stems, gram in scattered.get(tok, ()):
                if stems <= have:
                    if positions is None:
                        positions = defaultdict(list)
                        for i, t in enumerate(toks):
                            positions[t].append(i)
                    near = window(stems, positions) <= len(stems) + slack
                    if not near and not far:
                        continue
                    start = min(positions[t][0] for t in stems)
                    hits_of.append((gram, NEAR if near else SCATTERED,
                                    float(stems <= title), float(len(stems)), start / n))
        if lang == "de":
            compounds = self._compounds
            for tok in have:
                for mod, gram in compounds.get(tok, ()):
                    if mod in have:
                        start = min(toks.index(tok), toks.index(mod))
                        hits_of.append((gram, COMPOUND, float(tok in title and mod in title),
                                        1.0, start / n))
        for gram, kind, in_title, ntok, first in hits_of:
            hits = grams.get(gram, ())
            for pos, _ in hits:
                f = found.get(pos)
                if f is None:
                    found[pos] = [1.0, in_title, ntok, first, float(kind), float(len(hits)),
                                  float("nan") if prec is None else prec[pos]]
                    keys[pos] = gram
                elif f[4] < kind:  # a looser match of a subject found another way
                    f[4] = float(kind)
                    keys[pos] = gram

    def blind(self, withheld: np.ndarray) -> LabelMatcher:
        """The matcher as if no training record carried the ``withheld`` subjects: it
        finds their labels as ever, with ``lex_prec`` NaN, as for a heading never found in
        training (`Source.blind`)."""
        if self._prec is None:
            return self
        view = copy.copy(self)
        view._prec = np.where(withheld[:len(self._prec)], np.nan, self._prec)
        return view

    def set_matching(self, **changes: Any) -> None:
        """``prefer_exact``, ``scattered`` (and its ``scattered_slack``) or ``compounds``
        changed in a trained matcher:
        what an option does to a model whose ranker learned the other matching
        (`benchmarks/quality/tail.py`, `benchmarks/quality/ranker_variants.py`)."""
        unknown = set(changes) - set(MATCHING_OPTIONS)
        if unknown:
            raise ValueError(f"lexical matching has no option {sorted(unknown)}")
        self.config = replace(self.config, **changes)
        self._index_prefixes()

    def _words(self, batch: Batch, r: int, lang: str) -> list[str]:
        """Record ``r``'s words as its tokens were stemmed from (none without records)."""
        if len(batch.records) <= r:
            return []
        analyzer = self._trained(self.analyzer_)
        return [w for w in analyzer.words(batch.records[r].text) if w not in _STOP[lang]]

    def stem_key(self, label: str, lang: str) -> str:
        """A label's stemmed form as the table keys it in ``lang`` (without the prefix)."""
        analyzer = self._trained(self.analyzer_)
        toks = [t for t in analyzer.words(label) if t not in _STOP[lang]]
        return " ".join(analyzer.stem(toks, lang))

    def matched_alt(self, batch: Batch, r: int, pos: int) -> str | None:
        """The alternative label of subject ``pos`` found in record ``r``'s text, or None
        when a preferred label was (or nothing). Only subjects with alternative labels
        cost a stemming of their labels."""
        matches = batch.evidence.get(self.name)
        if not matches or pos not in matches[r] or self.analyzer_ is None or self.vocab_ is None:
            return None
        subj = self.vocab_.subjects[pos]
        if not subj.alt_labels:
            return None
        lang = batch.languages[r] if batch.languages[r] in ("de", "en") else "de"
        gram = matches[r][pos]
        if lang in subj.labels and self.stem_key(subj.labels[lang], lang) == gram:
            return None
        alts = list(subj.alt_labels.get(lang, []))
        if self.config.cross_language and lang == "en" and "en" not in subj.labels:
            alts += subj.alt_labels.get("de", [])  # looked for in English texts too
        return next((alt for alt in alts if self.stem_key(alt, lang) == gram), None)

    def reasons(self, batch: Batch, r: int, positions: Sequence[int]
                ) -> dict[int, dict[str, Any]]:
        """The subject's label in the record's language, for subjects found in its text;
        ``matched``: the alternative label found, where not a preferred one."""
        matches = batch.evidence.get(self.name)
        if not matches or self.vocab_ is None:
            return {}
        lang = batch.languages[r]
        out: dict[int, dict[str, Any]] = {}
        for pos in positions:
            if pos in matches[r]:
                out[pos] = {"label_match": self.vocab_.subjects[pos].label(lang)}
                alt = self.matched_alt(batch, r, pos)
                if alt is not None:
                    out[pos]["matched"] = alt
        return out

    def save(self, path: Path) -> None:
        # compact JSON by orjson: at 1.5M headings the table has 1.3M keys, 162 MiB and 18 s
        # to write indented by the json module
        write_bytes_atomic(path / "lexical.json", orjson.dumps({
            "max_ngram": self.config.max_ngram, "cross_language": self.config.cross_language,
            "max_key_subjects": self.config.max_key_subjects,
            "prefer_exact": self.config.prefer_exact,
            "scattered": self.config.scattered,
            "scattered_slack": self.config.scattered_slack, "compounds": self.config.compounds,
            "counts": self.found_ is not None, "table": self.table_}))
        if self.found_ is not None:
            save_npy_atomic(path / "found.npy", self.found_)
            save_npy_atomic(path / "gold.npy", self._trained(self.gold_))

    def load_state(self, path: Path, ctx: FitContext) -> None:
        data = orjson.loads((path / "lexical.json").read_bytes())  # indented before: alike
        self.table_ = {k: [tuple(x) for x in v] for k, v in data["table"].items()}
        # the matching the ranker learned from, whatever the recipe's parameters say now
        self.config = replace(self.config, cross_language=data["cross_language"],
                              # the cap the table was made with (none before it existed)
                              max_key_subjects=data.get("max_key_subjects"),
                              prefer_exact=data.get("prefer_exact", False),
                              scattered=data.get("scattered", False),
                              # saved before the window: matched anywhere
                              scattered_slack=data.get("scattered_slack"),
                              compounds=data.get("compounds", False))
        self.vocab_, self.analyzer_ = ctx.vocab, ctx.analyzer
        self._index_prefixes()
        # "counts": whether training records were counted (the hybrid's, not the lexical
        # recipe's); format-1 models, saved before the key, had counts exactly when the
        # files were written
        if data.get("counts", (path / "found.npy").exists()):
            self.found_ = load_npy(path / "found.npy")
            self.gold_ = load_npy(path / "gold.npy")
        self._set_precision()


def _training(ctx: FitContext) -> tuple[list[list[str]], RecordMemory, sp.csr_matrix]:
    """The training records' tokens, memory and gold rows, which the counts and the mining
    read."""
    if ctx.tokens is None or ctx.memory is None or ctx.Y is None:
        raise ValueError("source 'lexical' counts on training records: give their tokens, "
                         "the record memory and their gold subjects")
    return ctx.tokens, ctx.memory, ctx.Y
