"""FAISS inner-product search over L2-normalised vectors (cosine), saved without pickle."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from tagalign.io import atomic_dir, read_json, write_json_atomic


class VectorIndex:
    """``kind="flat"`` is exact (default); ``"ivf"`` (inverted lists, ``nprobe`` of about
    4·√n clusters scanned) and ``"hnsw"`` are approximate and much faster per query on
    large sets — a single query to a flat index reads every vector."""

    def __init__(self, kind: str = "flat", hnsw_m: int = 32, ef_search: int = 128,
                 nprobe: int = 24, seed: int = 13):
        if kind not in ("flat", "hnsw", "ivf"):
            raise ValueError(f"unknown index kind {kind!r}: use 'flat', 'ivf' or 'hnsw'")
        self.kind = kind
        self.hnsw_m = hnsw_m
        self.ef_search = ef_search
        self.nprobe = nprobe
        self.seed = seed
        self.index_: faiss.Index | None = None

    def build(self, vectors: np.ndarray) -> VectorIndex:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = vectors.shape[1]
        if self.kind == "flat" or (self.kind == "ivf" and len(vectors) < 10_000):
            self.index_ = faiss.IndexFlatIP(dim)
        elif self.kind == "ivf":
            nlist = int(4 * np.sqrt(len(vectors)))
            self.index_ = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist,
                                             faiss.METRIC_INNER_PRODUCT)
            rng = np.random.default_rng(self.seed)
            sample = vectors[rng.choice(len(vectors), min(len(vectors), 40 * nlist),
                                        replace=False)]
            self.index_.cp.seed = self.seed
            self.index_.train(sample)
            self.index_.nprobe = self.nprobe
        else:
            self.index_ = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index_.hnsw.efSearch = self.ef_search
        self.index_.add(vectors)
        return self

    def add(self, vectors: np.ndarray) -> None:
        self.index_.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def __len__(self) -> int:
        return 0 if self.index_ is None else self.index_.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row positions), best first; positions are -1 where fewer than k exist."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        return self.index_.search(q, min(k, len(self)))

    def vectors(self) -> np.ndarray:
        """The indexed vectors, in row order (what the subject export writes)."""
        if isinstance(self.index_, faiss.IndexIVF):
            self.index_.make_direct_map()
        return self.index_.reconstruct_n(0, len(self))

    def save(self, path: Path) -> None:
        with atomic_dir(Path(path)) as tmp:
            faiss.write_index(self.index_, str(tmp / "index.faiss"))
            write_json_atomic(tmp / "index.json", {"kind": self.kind, "hnsw_m": self.hnsw_m,
                                                   "ef_search": self.ef_search,
                                                   "nprobe": self.nprobe})

    @classmethod
    def load(cls, path: Path) -> VectorIndex:
        meta = read_json(Path(path) / "index.json")
        self = cls(meta["kind"], meta["hnsw_m"], meta["ef_search"], meta.get("nprobe", 24))
        self.index_ = faiss.read_index(str(Path(path) / "index.faiss"))
        if isinstance(self.index_, faiss.IndexHNSW):
            self.index_.hnsw.efSearch = self.ef_search
        if isinstance(self.index_, faiss.IndexIVF):
            self.index_.nprobe = self.nprobe
        return self
