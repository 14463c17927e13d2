"""Record domains: which variant of the TF-IDF baseline makes the best `classify` default.

Variants of the `linear` recipe (features × C × class weights), frozen sentence embeddings
concatenated with TF-IDF, and probability averages, all trained on train (all 90k records,
or a seeded ``--n-train`` sample for the sweep) and scored on dev like
`benchmarks/domains.py`: one seeded permutation of the labelled dev records, its first
``--n-tune`` records tune the thresholds (global + per class, micro-F1), every other dev
record is scored (disjoint). Every label of ``--label-set`` is scored (29 codes).

Each variant's dev probabilities are cached (``--out``/probs-NAME.npy), so averages of
variants cost nothing; results are appended to ``--out``/results.jsonl as they finish.

    flock /tmp/cpu.lock .venv/bin/python benchmarks/domains_variants.py --variants base,bi
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_domain_data_args  # noqa: E402

#: name → (word n-grams, chars of the text start for char n-grams (0: none), C,
#:          class_weight, embedding encoder or None)
VARIANTS = {
    "base": (1, 0, 4.0, None, None),
    "bi": (2, 0, 4.0, None, None),
    "bi-C8": (2, 0, 8.0, None, None),
    "bi-C16": (2, 0, 16.0, None, None),
    "bi-bal": (2, 0, 4.0, "balanced", None),
    "bi-char": (2, 200, 4.0, None, None),
    "bi-char-C8": (2, 200, 8.0, None, None),
    "bi-char-C16": (2, 200, 16.0, None, None),
    "bi-char-bal": (2, 200, 8.0, "balanced", None),
    "bi-char-bal4": (2, 200, 4.0, "balanced", None),
    "bi-char-e5": (2, 200, 8.0, None, "e5-small"),
    "bi-char-usem3": (2, 200, 8.0, None, "usem3"),
    "usem3": (0, 0, 8.0, None, "usem3"),
    "e5": (0, 0, 8.0, None, "e5-small"),
}


def best_variant(out: Path, n_train: int) -> str:
    """The best variant of the seeded-sample sweep (trained on fewer than ``n_train``)."""
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text("utf-8").splitlines()]
    rows = [r for r in rows if r["variant"] in VARIANTS and VARIANTS[r["variant"]][0]
            and r["n_train"] < max(n_train, 30001)]
    best = max(rows, key=lambda r: r["micro_f1"])["variant"]
    print(f"best of the sweep: {best}", flush=True)
    return best


def load(args):
    from tagalign.classify import read_examples, read_label_set
    from tagalign.classify.data import LabelSet
    from tagalign.records import InputReport

    quiet = InputReport(stream=open("/dev/null", "w"))  # noqa: SIM115
    train = read_examples(args.train, report=quiet, require_labels=True)
    dev = read_examples(args.dev, report=quiet, require_labels=True)
    if args.n_train and args.n_train < len(train):
        keep = np.sort(np.random.default_rng(args.seed).permutation(len(train))[:args.n_train])
        train = [train[i] for i in keep]
    labels = LabelSet(read_label_set(args.label_set))
    return train, dev, labels


def tokens(examples, path: Path) -> list[list[str]]:
    """Stemmed tokens (the project's `Analyzer`), cached by record id."""
    from tagalign.text.analyzer import Analyzer

    cache = {}
    if path.exists():
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            cache = json.load(fh)
    todo = [ex for ex in examples if ex.id not in cache]
    if todo:
        a = Analyzer()
        for ex in todo:
            cache[ex.id] = a.tokens(ex.text, ex.language if ex.language in ("de", "en")
                                    else None)
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            json.dump(cache, fh)
    return [cache[ex.id] for ex in examples]


def embeddings(examples, encoder: str, path: Path, chars: int) -> np.ndarray:
    """Frozen embeddings of the first ``chars`` characters, cached by record id."""
    from tagalign.encode import get_encoder

    cache: dict[str, np.ndarray] = {}
    if path.exists():
        z = np.load(path)
        cache = dict(zip(z["ids"].tolist(), z["x"], strict=True))
    todo = [ex for ex in examples if ex.id not in cache]
    if todo:
        enc = get_encoder(encoder)
        t0 = time.perf_counter()
        x = enc.encode([ex.text[:chars] for ex in todo])
        print(f"  {encoder}: {len(todo)} records in {time.perf_counter() - t0:.0f} s",
              flush=True)
        cache.update(zip([ex.id for ex in todo], np.asarray(x, np.float32), strict=True))
        ids = list(cache)
        np.savez(path, ids=np.array(ids), x=np.stack([cache[i] for i in ids]))
    return np.stack([cache[ex.id] for ex in examples])


def with_bigrams(toks: list[str]) -> list[str]:
    return toks + [f"{a} {b}" for a, b in zip(toks, toks[1:], strict=False)]


def features(train, dev, tr_tok, dev_tok, ngrams: int, chars: int):
    from sklearn.feature_extraction.text import TfidfVectorizer

    def ident(t):
        return t

    word = TfidfVectorizer(analyzer=ident, sublinear_tf=True, min_df=2, max_df=0.5,
                           dtype=np.float32)
    grow = with_bigrams if ngrams == 2 else ident
    xtr, xdv = [], []
    if ngrams:
        xtr.append(word.fit_transform([grow(t) for t in tr_tok]))
        xdv.append(word.transform([grow(t) for t in dev_tok]))
    if chars:
        char = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True,
                               min_df=2, max_df=0.5, dtype=np.float32)
        xtr.append(char.fit_transform([ex.text[:chars] for ex in train]))
        xdv.append(char.transform([ex.text[:chars] for ex in dev]))
    return xtr, xdv


def fit_predict(xtr, ytr, xdv, C: float, class_weight, threads: int) -> np.ndarray:
    from joblib import parallel_backend
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    ovr = OneVsRestClassifier(LogisticRegression(C=C, solver="liblinear", max_iter=1000,
                                                 class_weight=class_weight, random_state=0),
                              n_jobs=threads)
    xtr.sum_duplicates()
    xtr.sort_indices()
    with parallel_backend("threading", n_jobs=threads):  # liblinear frees the GIL
        ovr.fit(xtr, ytr.astype(int))
    probs = np.zeros((xdv.shape[0], ytr.shape[1]), np.float32)
    for j, est in enumerate(ovr.estimators_):
        if hasattr(est, "predict_proba"):
            probs[:, j] = est.predict_proba(xdv)[:, -1]
        else:  # constant predictor (label absent from the training sample)
            probs[:, j] = float(ytr[:, j].any())
    return probs


def score(name: str, probs: np.ndarray, ydev: np.ndarray, dev, labels, args, **extra):
    from tagalign.classify.metrics import report
    from tagalign.classify.thresholds import decide, tune

    perm = (np.arange(len(ydev)) if args.seed is None  # already in the seeded order
            else np.random.default_rng(args.seed).permutation(len(ydev)))
    t_idx, e_idx = perm[: args.n_tune], perm[args.n_tune:]
    found = tune(probs[t_idx], ydev[t_idx])
    rep = report(ydev[e_idx], decide(probs[e_idx], np.asarray(found["per_class"])),
                 labels.labels, [dev[i].language for i in e_idx])
    glob = report(ydev[e_idx], decide(probs[e_idx], found["global"]), labels.labels)
    r = {"variant": name, "n_labels": len(labels), "n_tune": len(t_idx),
         "n_eval": len(e_idx), "micro_f1": rep["micro_f1"], "macro_f1": rep["macro_f1"],
         "micro_f1_global": glob["micro_f1"],
         "by_language": {k: v["micro_f1"] for k, v in rep["by_language"].items()}, **extra}
    print(f"{name:24s} micro-F1 {r['micro_f1']:.4f} macro-F1 {r['macro_f1']:.4f} "
          f"(global thr. {r['micro_f1_global']:.4f}) {extra}", flush=True)
    with open(args.out / "results.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(r) + "\n")
    return r


def with_row(args, ydev, dev, labels, variant: str, row_probs: Path, n_tune: int,
             n_eval: int) -> None:
    """A variant beside (and averaged with) a `benchmarks/domains.py` row whose cached dev
    scores (``probs-full-ROW-seedS-TUNE-EVAL.npy``: its first TUNE records tune, the next
    EVAL are scored, in the same seeded order as here) are given: all three scored on the
    row's protocol."""
    perm = np.random.default_rng(args.seed).permutation(len(ydev))[: n_tune + n_eval]
    mine = np.load(args.out / f"probs-{variant}-nall.npy")[perm]
    row = np.load(row_probs)
    assert row.shape == mine.shape, (row.shape, mine.shape)
    sub = argparse.Namespace(**{**vars(args), "n_tune": n_tune, "seed": None})
    sub_dev = [dev[i] for i in perm]
    for name, probs in ((variant, mine), (row_probs.stem, row),
                        (f"avg({variant}, {row_probs.stem})", (mine + row) / 2)):
        score(f"{name} [{n_tune}/{n_eval}]", probs, ydev[perm], sub_dev, labels, sub,
              protocol=f"domains.py seed {args.seed}: {n_tune} tune / {n_eval} scored")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_domain_data_args(ap)
    ap.add_argument("--out", type=Path, default=Path("runs/domains-variants"))
    ap.add_argument("--variants", default="base,bi")
    ap.add_argument("--average", default="",
                    help="averages to score: a+b;c+d@n10000 (cached probabilities; "
                    "@nN: the variant trained on N records, default this run's)")
    ap.add_argument("--with-row", type=Path, default=None,
                    help="cached scores of a domains.py row (probs-full-ROW-seed0-T-E.npy) "
                    "to score the variant of --variants-nall beside and averaged with")
    ap.add_argument("--n-train", type=int, default=0, help="seeded train sample (0: all)")
    ap.add_argument("--n-tune", type=int, default=4000)
    ap.add_argument("--emb-chars", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from tagalign.runtime import set_threads

    set_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    train, dev, labels = load(args)
    ytr, ydev = labels.matrix(train), labels.matrix(dev)
    print(f"train {len(train):,} records ({int((ytr.sum(0) > 0).sum())} of {len(labels)} "
          f"labels), dev {len(dev):,}: {args.n_tune} tune, {len(dev) - args.n_tune} scored",
          flush=True)
    tag = f"n{args.n_train or 'all'}"
    variants = [v for v in args.variants.split(",") if v]
    if args.with_row:  # probabilities cached: nothing to train
        n_tune, n_eval = (int(x) for x in args.with_row.stem.split("-")[-2:])
        with_row(args, ydev, dev, labels, variants[0], args.with_row, n_tune, n_eval)
        return
    if "best" in variants or "best" in args.average:
        best = best_variant(args.out, len(train))
        variants = [best if v == "best" else v for v in variants]
        args.average = args.average.replace("best", best)
    if variants:
        t0 = time.perf_counter()
        tr_tok = tokens(train, args.out / "tokens-train.json.gz")
        dev_tok = tokens(dev, args.out / "tokens-dev.json.gz")
        print(f"tokens: {time.perf_counter() - t0:.0f} s", flush=True)
    built: dict = {}
    for name in variants:
        ngrams, chars, C, cw, enc = VARIANTS[name]
        t0 = time.perf_counter()
        if (ngrams, chars) not in built:
            built = {(ngrams, chars): features(train, dev, tr_tok, dev_tok, ngrams, chars)}
        xtr, xdv = (list(m) for m in built[(ngrams, chars)])
        if enc:
            etr = embeddings(train, enc, args.out / f"emb-{enc}-train.npz", args.emb_chars)
            edv = embeddings(dev, enc, args.out / f"emb-{enc}-dev.npz", args.emb_chars)
            xtr.append(sp.csr_matrix(etr / np.linalg.norm(etr, axis=1, keepdims=True)))
            xdv.append(sp.csr_matrix(edv / np.linalg.norm(edv, axis=1, keepdims=True)))
        xtr, xdv = sp.hstack(xtr).tocsr(), sp.hstack(xdv).tocsr()
        probs = fit_predict(xtr, ytr, xdv, C, cw, args.threads)
        minutes = (time.perf_counter() - t0) / 60
        np.save(args.out / f"probs-{name}-{tag}.npy", probs)
        score(name, probs, ydev, dev, labels, args, n_train=len(train),
              n_features=xtr.shape[1], train_min=round(minutes, 2))
    for combo in [c for c in args.average.split(";") if c]:
        parts = [np.load(args.out / "probs-{}-{}.npy".format(*(p.split("@") if "@" in p
                                                               else (p, tag))))
                 for p in combo.split("+")]
        score(f"avg({combo})", np.mean(parts, 0), ydev, dev, labels, args,
              n_train=len(train))


if __name__ == "__main__":
    main()
