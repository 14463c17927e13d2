"""FAISS inner-product search over L2-normalised vectors (cosine), saved without pickle."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from tagalign.io import atomic_dir, read_json, write_json_atomic


class VectorIndex:
    """``kind="flat"`` is exact (default); ``"hnsw"`` is approximate for huge vocabularies."""

    def __init__(self, kind: str = "flat", hnsw_m: int = 32, ef_search: int = 128):
        if kind not in ("flat", "hnsw"):
            raise ValueError(f"unknown index kind {kind!r}: use 'flat' or 'hnsw'")
        self.kind = kind
        self.hnsw_m = hnsw_m
        self.ef_search = ef_search
        self.index_: faiss.Index | None = None

    def build(self, vectors: np.ndarray) -> VectorIndex:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = vectors.shape[1]
        if self.kind == "flat":
            self.index_ = faiss.IndexFlatIP(dim)
        else:
            self.index_ = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index_.hnsw.efSearch = self.ef_search
        self.index_.add(vectors)
        return self

    def __len__(self) -> int:
        return 0 if self.index_ is None else self.index_.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row positions), best first; positions are -1 where fewer than k exist."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        return self.index_.search(q, min(k, len(self)))

    def vectors(self) -> np.ndarray:
        """The indexed vectors, in row order (what the subject export writes)."""
        return self.index_.reconstruct_n(0, len(self))

    def save(self, path: Path) -> None:
        with atomic_dir(Path(path)) as tmp:
            faiss.write_index(self.index_, str(tmp / "index.faiss"))
            write_json_atomic(tmp / "index.json", {"kind": self.kind, "hnsw_m": self.hnsw_m,
                                                   "ef_search": self.ef_search})

    @classmethod
    def load(cls, path: Path) -> VectorIndex:
        meta = read_json(Path(path) / "index.json")
        self = cls(meta["kind"], meta["hnsw_m"], meta["ef_search"])
        self.index_ = faiss.read_index(str(Path(path) / "index.faiss"))
        if self.kind == "hnsw":
            self.index_.hnsw.efSearch = self.ef_search
        return self
