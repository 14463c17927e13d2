#!/usr/bin/env python
"""Issue 11: a one-million-record neighbour memory on one machine — flat vs compressed.

Builds the hybrid's neighbour memory for ``--records`` synthetic records and prints, per
part, what it costs: the record-embedding index (``emb_knn``) as an exact flat float32
index and as the compressed `VectorIndex` kinds (``ivfsq8``, ``ivfpq``; file bytes, build
time, RSS of a fresh process that loads it, also memory-mapped, query records/s and
neighbour recall@K against the exact flat index on real dev queries), the TF-IDF matrices
of ``tfidf_knn`` (with the transposed copy it caches) and the record memory (ids, titles,
label lists).

Records are made by recombining real ones (no 1M-record catalogue here): synthetic record i
= the title of pool record a + the first half of the abstract of pool record b + the second
half of the abstract of pool record c (a, b, c drawn with a fixed seed from a seeded sample
of train of one language); its gold subjects are the union of the three records' subjects.
Encoding a million texts with the StaticEmbedding encoder would take about 10 minutes on
two cores, so each part of the pool is encoded once and the record vector is recombined:
StaticEmbedding mean-pools token vectors, so the vector of the concatenated text is the
token-count-weighted mean of its parts' vectors (checked against encoding the concatenated
text on a sample and printed). TF-IDF rows are built the same way from the parts' term
counts (sublinear tf, the project's idf, L2 norm — what the featurizer does).

    python -m benchmarks.scale.memory_1m --project runs/scale/growth-90452 [--records 1000000]
        [--pool 30000] [--queries 1000] [--k 30] [--kinds flat,ivfsq8,ivfpq] [--pq-m 64]

Budget knobs: ``--records``, ``--pool``, ``--queries``, ``--kinds``. Seeds are fixed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.preprocessing import normalize

from benchmarks._common import add_data_args
from tagalign.index import VectorIndex
from tagalign.records import Record, read_records
from tagalign.suggest.sources.base import Batch
from tagalign.suggest.sources.memory import RecordMemory, label_matrix
from tagalign.suggest.sources.neighbours import TfidfNeighbours
from tagalign.text import Analyzer
from tagalign.text.tfidf import TfidfFeaturizer
from tagalign.vocab import load_vocabulary

RUNS = Path(__file__).resolve().parents[2] / "runs" / "memory-1m"
ANCHOR = ("issue 11 anchor: a 1M-record neighbour memory must stay under the 24 GiB of this "
          "machine")
GIB = 2**30


def halves(text: str) -> tuple[str, str]:
    words = text.split()
    mid = len(words) // 2
    return " ".join(words[:mid]), " ".join(words[mid:])


@dataclass
class Recombination:
    """Which pool records make each synthetic record (the generator other benchmarks reuse:
    ``benchmarks/speed/tfidf_search.py --records``). ``parts``: the pool's titles, first and
    second abstract halves; ``abc``: the pool positions of record i's title and halves;
    ``rng``: the generator after the draw (for later seeded choices)."""

    pool: list[Record]
    parts: list[list[str]]
    langs: np.ndarray
    abc: np.ndarray
    rec_lang: np.ndarray
    rng: np.random.Generator

    @classmethod
    def draw(cls, train: Iterable[Record], featurizer: TfidfFeaturizer, pool_size: int,
             records: int, seed: int) -> Recombination:
        """``records`` recombined from a seeded ``pool_size`` sample of the train records
        with subjects, each from three pool records of one language (the pool's shares)."""
        pool = [r for r in train if r.subjects]
        if pool_size < len(pool):
            pool = random.Random(seed).sample(pool, pool_size)
        langs = np.array([featurizer.lang_of(r.language) for r in pool])
        parts = [[r.title for r in pool]] + [list(x) for x in zip(*(halves(r.abstract)
                                                                      for r in pool),
                                                                    strict=True)]
        rng = np.random.default_rng(seed)
        rec_lang = rng.choice(langs, records)  # languages in the pool's proportion
        abc = np.zeros((records, 3), np.int64)
        for lang in np.unique(langs):
            members = np.flatnonzero(langs == lang)
            rows = np.flatnonzero(rec_lang == lang)
            abc[rows] = members[rng.integers(0, len(members), (len(rows), 3))]
        return cls(pool, parts, langs, abc, rec_lang, rng)

    def tfidf(self, featurizer: TfidfFeaturizer, analyzer: Analyzer, lang: str
              ) -> tuple[np.ndarray, sp.csr_matrix]:
        """The synthetic records of ``lang`` (their positions) and their TF-IDF rows, summed
        from the parts' term counts (sublinear tf, the featurizer's idf, L2 norm: what
        the featurizer does to the concatenated text)."""
        vec = featurizer.vectorizers_[lang]
        members = np.flatnonzero(self.langs == lang)
        rows = np.flatnonzero(self.rec_lang == lang)
        if not len(rows):
            return rows, sp.csr_matrix((0, len(vec.vocabulary_)), dtype=np.float32)
        cv = CountVectorizer(analyzer=lambda t: t, vocabulary=vec.vocabulary_, dtype=np.float32)
        P = np.zeros(len(self.pool), np.int64)
        P[members] = np.arange(len(members))
        C = [cv.transform([analyzer.tokens(texts[i], lang) for i in members]).tocsr()
             for texts in self.parts]
        abc = self.abc
        X = (C[0][P[abc[rows, 0]]] + C[1][P[abc[rows, 1]]] + C[2][P[abc[rows, 2]]]).tocsr()
        if featurizer.sublinear_tf:
            np.log(X.data, X.data)
            X.data += 1.0
        return rows, normalize(X @ sp.diags(vec.idf_.astype(np.float32)), copy=False).tocsr()


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def child_index(path: Path, queries: Path, k: int, mmap: bool, nprobe: int | None) -> None:
    """Fresh process: load one index, search the queries; print RSS and speed."""
    before = rss_mb()
    t0 = time.perf_counter()
    index = VectorIndex.load(path, mmap=mmap)
    load_s = time.perf_counter() - t0
    if nprobe and hasattr(index.index_, "nprobe"):
        index.index_.nprobe = nprobe
    after_load = rss_mb()
    q = np.load(queries)
    index.search(q[:20], k)  # warm-up
    t0 = time.perf_counter()
    _, found = index.search(q, k)
    search_s = time.perf_counter() - t0
    np.save(path / f"found-{int(mmap)}-{nprobe}.npy", found)
    print(json.dumps({"load_s": round(load_s, 2), "rss_load_mb": round(after_load - before),
                      "rss_after_search_mb": round(rss_mb() - before),
                      "rec_per_s": round(len(q) / search_s, 1)}))


def child_memory(path: Path) -> None:
    before = rss_mb()
    t0 = time.perf_counter()
    memory = RecordMemory.load(path)
    print(json.dumps({"records": len(memory), "load_s": round(time.perf_counter() - t0, 2),
                      "rss_load_mb": round(rss_mb() - before)}))


def run_child(*argv: str) -> dict:
    out = subprocess.run([sys.executable, "-m", __spec__.name, *argv], capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"child {argv} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def csr_bytes(X: sp.csr_matrix) -> int:
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--project", type=Path, default=Path("runs/scale/growth-90452"))
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--pool", type=int, default=30_000, help="seeded train sample recombined")
    ap.add_argument("--queries", type=int, default=1000, help="seeded dev sample")
    ap.add_argument("--k", type=int, default=30, help="neighbours (the hybrid's knn_k)")
    ap.add_argument("--kinds", default="flat,ivfsq8,ivfpq")
    ap.add_argument("--pq-m", type=int, default=64, help="ivfpq bytes per vector")
    ap.add_argument("--nprobes", default="24,96",
                    help="IVF clusters scanned per query (the product's default is 24)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nprobe", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-index", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child-memory", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--mmap", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--query-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_index:
        return child_index(args.child_index, args.query_file, args.k, args.mmap, args.nprobe)
    if args.child_memory:
        return child_memory(args.child_memory)

    import psutil

    from tagalign.encode.static import StaticEmbeddingEncoder

    out = RUNS / f"{args.records}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"machine: {psutil.cpu_count()} CPUs, {psutil.virtual_memory().total / GIB:.1f} GiB; "
          f"load average {tuple(round(x, 2) for x in __import__('os').getloadavg())} at start")
    model = args.project / "model"
    encoder = StaticEmbeddingEncoder.load(model / "encoder")
    featurizer = TfidfFeaturizer.load(model / "tfidf")
    analyzer = Analyzer()
    rec = Recombination.draw(read_records(args.train), featurizer, args.pool, args.records,
                             args.seed)
    pool, parts, langs, abc, rec_lang, rng = (rec.pool, rec.parts, rec.langs, rec.abc,
                                              rec.rec_lang, rec.rng)
    print(f"pool: {len(pool)} train records (seed {args.seed}; "
          f"{dict(zip(*np.unique(langs, return_counts=True), strict=True))}), "
          f"encoder {args.project}/model/encoder (dim {encoder.dim})")

    # -- parts: title, first and second half of the abstract -------------------------------
    t0 = time.perf_counter()
    tok = encoder.model[0].tokenizer
    sums, counts = [], []
    for texts in parts:
        n = np.array([len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)])
        means = encoder.model.encode(texts, batch_size=512, normalize_embeddings=False,
                                     convert_to_numpy=True)
        sums.append((means * n[:, None]).astype(np.float32))
        counts.append(n)
    print(f"encoded {3 * len(pool)} parts in {time.perf_counter() - t0:.0f} s")

    n = args.records
    # check the recombination against encoding the concatenated text
    check = rng.choice(n, 300, replace=False)
    direct = encoder.encode([" ".join(p for p in (parts[0][a], parts[1][b], parts[2][c]) if p)
                             for a, b, c in abc[check]])

    def recombine(idx: np.ndarray) -> np.ndarray:
        v = sums[0][abc[idx, 0]] + sums[1][abc[idx, 1]] + sums[2][abc[idx, 2]]
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    cos = np.sum(direct * recombine(check), axis=1)
    print(f"recombined vs directly encoded vector, 300 records: cosine mean {cos.mean():.4f}, "
          f"min {cos.min():.4f}")
    t0 = time.perf_counter()
    vectors = np.lib.format.open_memmap(out / "vectors.npy", "w+", np.float32,
                                        (n, encoder.dim))
    for start in range(0, n, 100_000):
        vectors[start:start + 100_000] = recombine(np.arange(start, min(n, start + 100_000)))
    vectors.flush()
    print(f"{n:,} record vectors ({vectors.nbytes / GIB:.2f} GiB float32) in "
          f"{time.perf_counter() - t0:.0f} s")

    # queries: real dev records, encoded and featurised as the hybrid does
    dev = random.Random(args.seed + 1).sample(list(read_records(args.dev)), args.queries)
    np.save(out / "queries.npy", encoder.encode([r.text for r in dev]))
    dev_langs = [featurizer.lang_of(r.language) for r in dev]
    dev_tokens = [analyzer.tokens(r.text, lg) for r, lg in zip(dev, dev_langs, strict=True)]
    dev_tfidf = featurizer.transform(dev_tokens, dev_langs)
    knn_s: dict[int, float] = {}  # memory size → seconds for the dev queries (all languages)

    # -- record memory: ids, titles, label lists ---------------------------------------------
    t0 = time.perf_counter()
    vocab = load_vocabulary(args.vocab)
    Yp = label_matrix(pool, vocab)
    Y = (Yp[abc[:, 0]] + Yp[abc[:, 1]] + Yp[abc[:, 2]]).tocsr()
    Y.data[:] = 1.0
    memory = RecordMemory([f"m{i}" for i in range(n)], [pool[a].title for a in abc[:, 0]],
                          rec_lang.tolist(), Y)
    memory.save(out / "memory")
    del memory
    mem = run_child("--child-memory", str(out / "memory"))
    mem_disk = sum(p.stat().st_size for p in (out / "memory").iterdir())
    print(f"record memory: {n:,} records, {Y.nnz / n:.1f} labels each; built and saved in "
          f"{time.perf_counter() - t0:.0f} s; {mem_disk / 2**20:.0f} MiB on disk; a fresh "
          f"process loads it in {mem['load_s']} s, RSS +{mem['rss_load_mb']} MiB")

    # -- TF-IDF matrices of tfidf_knn ---------------------------------------------------------
    t0 = time.perf_counter()
    tfidf_bytes = 0
    nnz = 0
    for lang in featurizer.vectorizers_:
        rows, X = rec.tfidf(featurizer, analyzer, lang)
        if not len(rows):
            continue
        for size in sorted({len(rows) // 10, len(rows)}):  # tfidf_knn query time, 1/10 and all
            knn = TfidfNeighbours(k=args.k)
            knn.X_[lang], knn.rows_[lang] = X[:size], rows[:size]
            batch = Batch(dev, dev_langs, dev_tokens, dev_tokens)
            batch.tfidf = {lang: dev_tfidf[lang]} if lang in dev_tfidf else {}
            knn._search_index(lang)  # built once at load in the product, not per query
            t1 = time.perf_counter()
            knn.neighbours(batch)
            key = 10 if size < len(rows) else 1
            knn_s[key] = knn_s.get(key, 0.0) + time.perf_counter() - t1
            del knn
        XT = X.T.tocsr()  # what TfidfNeighbours caches for the query product
        tfidf_bytes += csr_bytes(X) + csr_bytes(XT)
        nnz += X.nnz
        print(f"tfidf {lang}: {X.shape[0]:,} × {X.shape[1]:,}, {X.nnz / X.shape[0]:.0f} terms "
              f"per record, {csr_bytes(X) / GIB:.2f} GiB + transposed copy "
              f"{csr_bytes(XT) / GIB:.2f} GiB; a 256-query product block is dense "
              f"256 × {X.shape[0]:,} float32 = {256 * X.shape[0] * 4 / GIB:.2f} GiB")
        del X, XT
    print(f"tfidf matrices built in {time.perf_counter() - t0:.0f} s: {tfidf_bytes / GIB:.2f} "
          f"GiB in memory ({nnz / n:.0f} terms per record)")
    print(f"tfidf_knn neighbours of the {args.queries} dev queries (k = {args.k}, exact sparse "
          f"product): memory of {n // 10:,} records {args.queries / knn_s[10]:,.0f} queries/s; "
          f"{n:,} records {args.queries / knn_s[1]:,.0f} queries/s")

    # -- record-embedding index: flat vs compressed --------------------------------------------
    rows = []
    for kind in args.kinds.split(","):
        t0 = time.perf_counter()
        index = VectorIndex(kind, pq_m=args.pq_m).build(vectors)
        build_s = time.perf_counter() - t0
        index.save(out / f"index-{kind}")
        del index
        size = (out / f"index-{kind}" / "index.faiss").stat().st_size
        probes = [int(x) for x in args.nprobes.split(",")] if kind != "flat" else [None]
        for mmap, nprobe in [(False, p) for p in probes] + [(True, probes[0])]:
            m = run_child("--child-index", str(out / f"index-{kind}"), "--query-file",
                          str(out / "queries.npy"), "--k", str(args.k),
                          *(["--mmap"] if mmap else []),
                          *(["--nprobe", str(nprobe)] if nprobe else []))
            found = np.load(out / f"index-{kind}" / f"found-{int(mmap)}-{nprobe}.npy")
            name = f"{kind}{f' nprobe {nprobe}' if nprobe else ''}{' mmap' if mmap else ''}"
            rows.append({"kind": kind, "name": name, "mmap": mmap, "file_mb": size / 2**20,
                         "build_s": build_s, "found": found, **m})
            print(f"{name}: {json.dumps(m)}; file {size / 2**20:,.0f} MiB; built in "
                  f"{build_s:.0f} s", flush=True)
    exact = next((r["found"] for r in rows if r["kind"] == "flat"), None)
    print()
    print(f"emb_knn index over {n:,} records ({encoder.dim}-dim), {args.queries} real dev "
          f"queries (seed {args.seed + 1}), k = {args.k}; recall = share of the exact flat "
          "top-k found")
    print(f"| index | file MiB | build s | RSS after load MiB | RSS after {args.queries} "
          f"queries MiB | queries/s | recall@{args.k} | recall@10 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rec = lambda kk, r=r: np.mean([len(set(f[:kk]) & set(t[:kk])) / kk  # noqa: E731
                                       for f, t in zip(r["found"], exact, strict=True)])
        print(f"| {r['name']} | {r['file_mb']:,.0f} | "
              f"{r['build_s']:.0f} | {r['rss_load_mb']:,} | {r['rss_after_search_mb']:,} | "
              f"{r['rec_per_s']:,.0f} | "
              f"{rec(args.k) if exact is not None else float('nan'):.3f} | "
              f"{rec(10) if exact is not None else float('nan'):.3f} |")
    total = {r["kind"]: (mem["rss_load_mb"] * 2**20 + tfidf_bytes) / GIB
             + r["rss_after_search_mb"] / 1024 for r in rows if not r["mmap"]}  # last nprobe
    print("neighbour memory at {:,} records (record memory RSS + TF-IDF matrices and their "
          "transposed copies + emb_knn index RSS): {}".format(n, "; ".join(
              f"{k} {v:.1f} GiB" for k, v in total.items())))
    print(ANCHOR)


if __name__ == "__main__":
    main()
