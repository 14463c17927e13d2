#!/usr/bin/env python
"""Issue 18: ranker variants of the hybrid on the stacking stage of `hybrid_ceiling.py`.

Protocol: `benchmarks/hybrid_ceiling.py` fits the sources on split A of train and caches
the wide candidates of split B (the ranker's records) and of a seeded dev sample. Here each
variant's ranker learns from split B only (early stopping on a seeded 10 % of B's records)
and is scored on the dev sample; dev trains nothing. Variants: the objective (binary vs
LightGBM lambdarank, grouped by record), candidates per source, and new features
(co-assignment agreement with the record's other strong candidates, subject specificity,
how often a label found in a text is a gold subject); issue 33, for English records: English
label variants mined from split A's English records in the lexical source, more candidates
per source for English records only, a ranker per language. Prints avg R@5..20, R@20, F1@5, and
avg R for English, German and Thesis records, and the ranker's fit time.

    python benchmarks/hybrid_ranker.py [--workdir runs/h18-stage] [--variants "a;b"]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from _common import add_data_args, seeded_sample
from hybrid_ceiling import held, load_candidates, union
from tagalign.evaluate import evaluate
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.records import read_records
from tagalign.suggest.agreement import AGREEMENT_FEATURES, CoAssignment, rrf
from tagalign.suggest.fusion import FusionRanker, top_k
from tagalign.suggest.sources.base import Batch, Candidates, record_languages
from tagalign.suggest.sources.lexical import MINED, LabelMatcher
from tagalign.suggest.sources.memory import label_matrix
from tagalign.train.phases import PhaseRunner
from tagalign.vocab import load_vocabulary

KS = [5, 10, 15, 20]


def subset(cands: list[Candidates], rows: np.ndarray) -> list[Candidates]:
    """The candidates of records ``rows`` (sorted positions), renumbered 0..len-1."""
    out = []
    for c in cands:
        keep = np.isin(c.rows, rows)
        out.append(Candidates(np.searchsorted(rows, c.rows[keep]), c.cols[keep],
                              c.feats[keep], c.names))
    return out


def truncate_by_language(c: Candidates, k: int, k_en: int, english: np.ndarray
                         ) -> Candidates:
    """Each record's first ``k`` candidates, ``k_en`` for English records (``english``: a
    flag per record row)."""
    rank = [i for i, name in enumerate(c.names) if name.endswith("_rank")]
    if not rank:
        return c
    keep = c.feats[:, rank[0]] <= np.where(english[c.rows], k_en, k)
    return Candidates(c.rows[keep], c.cols[keep], c.feats[keep], c.names)


def table(pipe, records, cands, k, extras):
    if "k_en" in extras:  # more candidates per source for English records only
        english = np.array([lg == "en" for lg in record_languages(records)])
        cut = [truncate_by_language(c, k, extras["k_en"], english) for c in cands]
    else:
        cut = [c.truncate(k) for c in cands]
    if extras.get("lexical") is not None:  # another lexical source's candidates (see main)
        cut = [extras["lexical"] if c.names[0] == "lex_count" else c for c in cut]
    if "drop" in extras:  # a source left out (its candidates and features)
        cut = [c for c in cut if c.names[0] != extras["drop"]]
    batch = Batch.tokenised(records, pipe.analyzer)
    rows, cols, X, names, support = pipe.features(batch, cut)
    cols_extra, names_extra = [], []
    if "agree" in extras:
        proxy = rrf(X, names)
        cols_extra.append(extras["agree"].features(rows, cols, proxy, len(records),
                                                   extras.get("top_m", 10)))
        names_extra += AGREEMENT_FEATURES
    if "spec" in extras:
        cols_extra.append(extras["spec"][cols][:, None])
        names_extra += ["label_words"]
    if "group_prior" in extras:  # P(subject | record type) and P(subject | language), split A
        types, by_type, langs, by_lang = extras["group_prior"]
        t = np.array([types.get(r.type or "", 0) for r in records])[rows]
        lg = np.array([langs.get(r.language or "", 0) for r in records])[rows]
        cols_extra += [by_type[t, cols][:, None], by_lang[lg, cols][:, None]]
        names_extra += ["prior_type", "prior_lang"]
    if "has_en" in extras:  # whether the subject has an English label at all
        cols_extra.append(extras["has_en"][cols][:, None])
        names_extra += ["has_en_label"]
    if cols_extra:
        X = np.hstack([X, *cols_extra]).astype(np.float32)
        names = names + names_extra
    y = np.asarray(label_matrix(records, pipe.vocab)[rows, cols]).ravel()
    return rows, cols, X, y, names


def priors_by_group(records, Y) -> tuple:
    """Smoothed subject frequency among split A's records of each type and language."""
    out = []
    for key in (lambda r: r.type or "", lambda r: r.language or ""):
        names = sorted({key(r) for r in records})
        index = {n: i for i, n in enumerate(names)}
        g = np.array([index[key(r)] for r in records])
        table = np.zeros((len(names), Y.shape[1]), np.float32)
        for i in range(len(names)):
            sel = Y[g == i]
            table[i] = (np.asarray(sel.sum(0)).ravel() + 0.1) / (sel.shape[0] + 1)
        out += [index, table]
    return tuple(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--workdir", type=Path, default=Path("runs/h18-stage"))
    ap.add_argument("--widest", type=int, default=100)
    ap.add_argument("--limit-train", type=int, help="as given to hybrid_ceiling.py")
    ap.add_argument("--seed", type=int, default=0, help="as given to hybrid_ceiling.py")
    ap.add_argument("--variants", default="", help="variant names separated by ;")
    ap.add_argument("--out", type=Path, help="append each variant's figures (JSON lines)")
    args = ap.parse_args()

    vocab = load_vocabulary(args.vocab)
    train = seeded_sample(list(read_records(args.train, vocab=vocab)), args.limit_train,
                          args.seed)
    by_id = {r.id: r for r in read_records(args.dev, vocab=vocab)}
    dev = [by_id[i] for i in json.loads((args.workdir / "dev-ids.json").read_text())]
    # agreement features are added per variant here, not by the pipeline
    stage = HybridRecipe(vocab, agreement=False).trainer().stack(train, PhaseRunner(args.workdir,
                                                                          quiet=True))
    pipe = stage.pipeline
    B = stage.ranker_records
    _, cb = load_candidates(args.workdir / f"candidates-B-{args.widest}.npz")
    _, cd = load_candidates(args.workdir / f"candidates-dev-{args.widest}.npz")
    b_ids = {r.id for r in B}
    rec_a = [r for r in stage.records if r.id not in b_ids]
    t0 = time.perf_counter()
    co = CoAssignment.from_labels(pipe.memory.Y)
    print(f"co-assignment of split A: {time.perf_counter() - t0:.1f} s, "
          f"{co.cond.nnz:,} pairs")
    words = np.array([len(s.label("de").split()) for s in vocab.subjects], np.float32)
    has_en = np.array([bool(s.labels.get("en")) for s in vocab.subjects], np.float32)
    group_prior = priors_by_group(rec_a, pipe.memory.Y)
    # the lexical source as trained now (with lex_prec counts over split A) and with
    # German labels looked for in English texts; their candidates for B and dev
    a_tokens = [pipe.analyzer.tokens(r.text, lg) for r, lg in zip(rec_a, pipe.memory.languages,
                                                                   strict=True)]
    ctx = SimpleNamespace(analyzer=pipe.analyzer, vocab=vocab, records=rec_a, Y=pipe.memory.Y,
                          tokens=a_tokens, memory=pipe.memory)
    # issue 33: English label variants mined from split A's English records (support >= 3,
    # smoothed precision >= 0.3 or 0.5; `benchmarks/mined_labels.py` checks them on held-out
    # split A records), for subjects without an English label or for all
    lex_params = {"new": {}, "cross": {"cross_language": True},
                  "mined": {"mine_min_support": 3, "mine_min_precision": 0.3},
                  "mined p50": {"mine_min_support": 3, "mine_min_precision": 0.5},
                  "mined all": {"mine_min_support": 3, "mine_min_precision": 0.3,
                                "mine_all_subjects": True},
                  "mined all p20": {"mine_min_support": 3, "mine_min_precision": 0.2,
                                    "mine_all_subjects": True},
                  "mined + cross": {"mine_min_support": 3, "mine_min_precision": 0.3,
                                    "cross_language": True}}
    lex: dict[str, tuple[Candidates, Candidates]] = {}
    gold_dev = label_matrix(dev, vocab).tocsr()
    en_dev = np.array([lg == "en" for lg in record_languages(dev)])
    en_gold = gold_dev[en_dev].sum()

    def english_found(c: Candidates, others: list[Candidates]) -> tuple[float, float]:
        """Shares of the dev sample's English gold subjects that ``c`` holds, and that it
        holds with the ``others`` (the pool at 30 per source)."""
        alone, pool = (held(x, gold_dev, len(vocab))[en_dev].sum() / en_gold
                       for x in (c, union([c, *others])))
        return alone, pool

    def lexical(name: str) -> tuple[Candidates, Candidates]:
        """The lexical source ``name`` fitted on split A (on first use): its candidates for
        B and for the dev sample."""
        if name not in lex:
            t0 = time.perf_counter()
            src = LabelMatcher(**lex_params[name])
            src.fit(ctx)
            fit_s = time.perf_counter() - t0
            lex[name] = (src.candidates(Batch.tokenised(B, pipe.analyzer)),
                         src.candidates(Batch.tokenised(dev, pipe.analyzer)))
            mined = sum(pref == MINED for hits in src.table_.values() for _, pref in hits)
            alone, pool = english_found(lex[name][1], [c.truncate(30) for c in cd
                                                       if c.names[0] != "lex_count"])
            print(f"lexical {name}: fit with counts over split A in {fit_s:.0f} s"
                  + (f", {mined:,} mined label variants" if mined else "")
                  + f"; English gold of the dev sample found {alone:.3f}, in the pool "
                  f"{pool:.3f}", flush=True)
        return lex[name]

    variants = {
        "base k30 binary": (30, {}, "binary"),
        "+ lex_prec": (30, {"lexical": "new"}, "binary"),
        "+ lex_prec + agreement": (30, {"lexical": "new", "agree": co}, "binary"),
        "+ lex_prec + agr + words": (30, {"lexical": "new", "agree": co, "spec": words},
                                     "binary"),
        "+ lex_prec + agr, cross-lang": (30, {"lexical": "cross", "agree": co}, "binary"),
        "+ lex_prec + agr, k50": (50, {"lexical": "new", "agree": co}, "binary"),
        "+ lex_prec + agr, lambdarank": (30, {"lexical": "new", "agree": co}, "lambdarank"),
        "+ lex_prec + agr, leaves 127": (30, {"lexical": "new", "agree": co,
                                              "lgb": {"num_leaves": 127,
                                                      "min_data_in_leaf": 100}}, "binary"),
        "+ lex_prec + agr, lr 0.1": (30, {"lexical": "new", "agree": co,
                                          "lgb": {"learning_rate": 0.1}}, "binary"),
        "+ lex_prec + agr, no tfidf_knn": (30, {"lexical": "new", "agree": co,
                                                "drop": "tknn_vote"}, "binary"),
        "+ lex_prec + agr, no omikuji": (30, {"lexical": "new", "agree": co,
                                              "drop": "omikuji_score"}, "binary"),
        "+ lex_prec + agr + group priors": (30, {"lexical": "new", "agree": co,
                                                 "group_prior": group_prior}, "binary"),
        "+ lex_prec + agr + has_en": (30, {"lexical": "new", "agree": co, "has_en": has_en},
                                      "binary"),
        "+ lex_prec + agr + group priors + has_en": (
            30, {"lexical": "new", "agree": co, "group_prior": group_prior, "has_en": has_en},
            "binary"),
        "+ lex_prec + agr, B 25 %": (30, {"lexical": "new", "agree": co, "b_share": 0.25},
                                     "binary"),
        "+ lex_prec + agr, B 50 %": (30, {"lexical": "new", "agree": co, "b_share": 0.5},
                                     "binary"),
        "+ lex_prec + agr, mined en": (30, {"lexical": "mined", "agree": co}, "binary"),
        "+ lex_prec + agr, mined en p50": (30, {"lexical": "mined p50", "agree": co},
                                           "binary"),
        "+ lex_prec + agr, mined en all": (30, {"lexical": "mined all", "agree": co},
                                           "binary"),
        "+ lex_prec + agr, mined en all p20": (30, {"lexical": "mined all p20", "agree": co},
                                               "binary"),
        "+ lex_prec + agr, mined en + cross": (30, {"lexical": "mined + cross",
                                                    "agree": co}, "binary"),
        **{f"{name}, seed {seed}": (k, {**extras, "seed": seed}, objective)
           for name, (k, extras, objective) in (
               ("+ lex_prec + agreement", (30, {"lexical": "new", "agree": co}, "binary")),
               ("+ lex_prec + agr, mined en", (30, {"lexical": "mined", "agree": co},
                                               "binary")),
               ("+ lex_prec + agr, mined en + cross", (30, {"lexical": "mined + cross",
                                                            "agree": co}, "binary")),
               ("+ lex_prec + agr, cross-lang", (30, {"lexical": "cross", "agree": co},
                                                 "binary")))
           for seed in (1, 2)},
        "+ lex_prec + agr, k50 en": (30, {"lexical": "new", "agree": co, "k_en": 50},
                                     "binary"),
        "+ lex_prec + agr, ranker per language": (30, {"lexical": "new", "agree": co,
                                                       "per_language": True}, "binary"),
        "base lambdarank": (30, {}, "lambdarank"),
        "+ agreement": (30, {"agree": co}, "binary"),
    }
    chosen = [v.strip() for v in args.variants.split(";") if v.strip()] or list(variants)
    print(f"\n{'variant':<34}{'avgR':>7}{'R@20':>7}{'F1@5':>7}{'en':>7}{'de':>7}"
          f"{'Thesis':>8}{'fit s':>7}{'rows/rec':>9}")
    for name in chosen:
        k, extras, objective = variants[name]
        lex_b, lex_d = lexical(extras["lexical"]) if "lexical" in extras else (None, None)
        rb, cb_, Xb, yb, names = table(pipe, B, cb, k, {**extras, "lexical": lex_b}
                                       if lex_b else extras)
        rd, cd_, Xd, _, _ = table(pipe, dev, cd, k, {**extras, "lexical": lex_d}
                                  if lex_d else extras)
        if "b_share" in extras:  # a learning curve: a seeded share of B's records only
            keep = np.random.default_rng(0).permutation(len(B))[:round(extras["b_share"]
                                                                       * len(B))]
            sel = np.isin(rb, keep)
            rb, Xb, yb = np.searchsorted(np.sort(keep), rb[sel]), Xb[sel], yb[sel]
        params = {"objective": objective, **extras.get("lgb", {})}
        if objective == "lambdarank":
            params.update({"metric": "ndcg", "eval_at": [20]})
        t0 = time.perf_counter()
        if extras.get("per_language"):  # one ranker for English records, one for the rest
            en_b = np.array([lg == "en" for lg in record_languages(B)])[rb]
            en_d = np.array([lg == "en" for lg in record_languages(dev)])[rd]
            s = np.zeros(len(rd))
            for mb, md in ((en_b, en_d), (~en_b, ~en_d)):
                ranker = FusionRanker(num_rounds=500, **params).fit(
                    Xb[mb], yb[mb], rb[mb], names, seed=extras.get("seed", 13))
                s[md] = ranker.predict(Xd[md])
            fit_s = time.perf_counter() - t0
        else:
            ranker = FusionRanker(num_rounds=500, **params).fit(
                Xb, yb, rb, names, seed=extras.get("seed", 13))
            fit_s = time.perf_counter() - t0
            s = ranker.predict(Xd)
        ranked = top_k(rd, cd_, s, len(dev), 20)
        preds = {r.id: [vocab.subjects[p].id for p, _, _ in row]
                 for r, row in zip(dev, ranked, strict=True)}
        m = evaluate(dev, preds, ks=KS)
        o = m["overall"]
        lang, typ = m["by_language"], m["by_type"]
        print(f"{name:<34}{o['avg_recall']:7.4f}{o['recall@20']:7.4f}{o['f1@5']:7.4f}"
              f"{lang['en']['avg_recall']:7.4f}{lang['de']['avg_recall']:7.4f}"
              f"{typ['Thesis']['avg_recall']:8.4f}{fit_s:7.0f}{len(rd) / len(dev):9.0f}",
              flush=True)
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps({"variant": name, "overall": o, "en": lang["en"],
                                    "de": lang["de"], "thesis": typ["Thesis"],
                                    "fit_s": fit_s,
                                    "importance": ranker.importance()}) + "\n")


if __name__ == "__main__":
    main()
