"""FAISS inner-product search over L2-normalised vectors (cosine), saved without pickle."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

import faiss
import numpy as np

from tagalign.errors import NotTrainedError
from tagalign.io import atomic_dir, read_json, write_json_atomic

KINDS = ("flat", "hnsw", "ivf", "ivfsq8", "ivfpq")
IVF_KINDS = ("ivf", "ivfsq8", "ivfpq")
# what faiss.read_index must return for each kind (flat also stands in for a small IVF set)
FAISS_TYPES = {"flat": (faiss.IndexFlatIP,), "hnsw": (faiss.IndexHNSWFlat,),
               "ivf": (faiss.IndexIVFFlat, faiss.IndexFlatIP),
               "ivfsq8": (faiss.IndexIVFScalarQuantizer, faiss.IndexFlatIP),
               "ivfpq": (faiss.IndexIVFPQ, faiss.IndexFlatIP)}


@dataclass(frozen=True)
class LazyRows:
    """``n`` rows of an index made only when asked for: ``make(positions)`` gives the rows at
    those positions, each row the same whichever others are asked with it (an encoder's
    normalised vectors of texts). `VectorIndex.build` takes it as a part: it asks for the
    rows its clustering trains on, then adds the rest ``chunk`` rows at a time, so the whole
    part is never held (the 2.86M label rows of a 1.5M-heading vocabulary: 4.2 GiB;
    issue 48)."""

    n: int
    make: Callable[[np.ndarray], np.ndarray]
    chunk: int = 100_000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.make(positions), dtype=np.float32)

    def chunks(self) -> Iterator[np.ndarray]:
        for start in range(0, self.n, self.chunk):
            yield self[np.arange(start, min(start + self.chunk, self.n))]


Part = np.ndarray | LazyRows


def _chunks(part: Part) -> Iterator[np.ndarray]:
    return part.chunks() if isinstance(part, LazyRows) else iter([part])


def _rows(parts: Sequence[Part], idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` (sorted) of the parts' concatenation, without making it."""
    starts = np.cumsum([0] + [len(p) for p in parts])
    return np.concatenate([p[idx[(idx >= a) & (idx < b)] - a]
                           for p, a, b in zip(parts, starts[:-1], starts[1:], strict=True)])


class VectorIndex:
    """``kind="flat"`` is exact (default); ``"ivf"`` (inverted lists, ``nprobe`` of about
    4·√n clusters scanned) and ``"hnsw"`` are approximate and much faster per query on
    large sets — a single query to a flat index reads every vector.

    Compressed kinds for large neighbour memories (e.g. a million training records), both
    inverted lists like ``ivf``: ``"ivfsq8"`` stores each dimension in one byte (4× smaller
    than float32, near-exact ranking), ``"ivfpq"`` stores ``pq_m`` bytes per vector (product
    quantisation with ``2**pq_bits`` centroids per sub-vector; 256-dim float32 is 1 KiB, with
    ``pq_m=64`` it is 64 bytes) at some cost in recall. Sets smaller than ``min_ivf`` vectors
    use an exact flat index (too few to train the clusters and codebooks on)."""

    def __init__(self, kind: str = "flat", hnsw_m: int = 32, ef_search: int = 128,
                 nprobe: int = 24, seed: int = 13, nlist: int | None = None,
                 pq_m: int | None = None, pq_bits: int = 8, min_ivf: int = 10_000):
        if kind not in KINDS:
            raise ValueError(f"unknown index kind {kind!r}: use one of {', '.join(KINDS)}")
        self.kind = kind
        self.hnsw_m = hnsw_m
        self.ef_search = ef_search
        self.nprobe = nprobe
        self.seed = seed
        self.nlist = nlist  # None: 4·√n
        self.pq_m = pq_m  # None: dim / 4 (4 dimensions per byte)
        self.pq_bits = pq_bits
        self.min_ivf = min_ivf
        self.mmap = False  # loaded memory-mapped (read-only)
        self.index_: faiss.Index | None = None
        self._direct_map = Lock()  # `_row_mapped` maps an inverted-list index's ids once
        self._mapped = False  # … and says so only once the map is whole

    def probe(self, nprobe: int) -> VectorIndex:
        """Scan ``nprobe`` inverted lists a query from now on (the ``ivf`` kinds; the others
        have none), built or loaded."""
        self.nprobe = nprobe
        if isinstance(self.index_, faiss.IndexIVF):
            self.index_.nprobe = nprobe
        return self

    @property
    def _index(self) -> faiss.Index:
        """The built or loaded faiss index; `NotTrainedError` before `build` or `load`."""
        if self.index_ is None:
            raise NotTrainedError("this vector index", "build or load it first")
        return self.index_

    def _ivf(self, dim: int, nlist: int) -> faiss.IndexIVF:
        quantizer = faiss.IndexFlatIP(dim)
        ip = faiss.METRIC_INNER_PRODUCT
        if self.kind == "ivf":
            return faiss.IndexIVFFlat(quantizer, dim, nlist, ip)
        if self.kind == "ivfsq8":
            return faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist,
                                                 faiss.ScalarQuantizer.QT_8bit, ip)
        m = self.pq_m or max(1, dim // 4)
        if dim % m:
            raise ValueError(f"ivfpq: pq_m={m} must divide the vector dimension {dim}")
        return faiss.IndexIVFPQ(quantizer, dim, nlist, m, self.pq_bits, ip)

    def build(self, vectors: Part | Sequence[Part]) -> VectorIndex:
        """The index of ``vectors``: one array, or a sequence of parts taken as their
        concatenation without making it (the same index, one copy fewer: the label index of
        a 1.5M-heading vocabulary, 4.2 GiB, held its parts and their join at once; issue 48).
        A part may be `LazyRows`, made as the build asks for its rows: the same index as
        of the rows made at once."""
        parts: list[Part] = [v if isinstance(v, LazyRows)
                             else np.ascontiguousarray(v, dtype=np.float32)
                             for v in (vectors if isinstance(vectors, (list, tuple))
                                       else [vectors])]
        if self.kind == "hnsw" and len(parts) > 1:  # its graph depends on how rows arrive
            parts = [np.concatenate([c for p in parts for c in _chunks(p)])]
        n = sum(len(v) for v in parts)
        first = next((p for p in parts if len(p)), parts[0])
        if isinstance(first, LazyRows) and not len(first):
            raise ValueError("an index of no rows needs an array part to say their dimension")
        dim = (first if isinstance(first, np.ndarray) else first[np.zeros(1, np.int64)]
               ).shape[1]
        if self.kind == "flat" or (self.kind in IVF_KINDS and n < self.min_ivf):
            self.index_ = faiss.IndexFlatIP(dim)
        elif self.kind in IVF_KINDS:
            nlist = self.nlist or int(4 * np.sqrt(n))
            self.index_ = self._ivf(dim, nlist)
            rng = np.random.default_rng(self.seed)
            # 40 points per cluster; product quantisation wants ≥ 39·2^bits for its codebooks
            want = max(40 * nlist, 64 * 2 ** self.pq_bits if self.kind == "ivfpq" else 0)
            sample = _rows(parts, np.sort(rng.choice(n, min(n, want), replace=False)))
            self.index_.cp.seed = self.seed
            if self.kind == "ivfpq":
                # faiss's stub: _ivf returns an IndexIVF; this kind's is an IndexIVFPQ, with pq
                self.index_.pq.cp.seed = self.seed  # type: ignore[attr-defined]
            self.index_.train(sample)
            del sample
            self.index_.nprobe = self.nprobe
        else:
            self.index_ = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index_.hnsw.efSearch = self.ef_search
        for part in parts:
            for rows in _chunks(part):
                self.index_.add(rows)
        return self

    def add(self, vectors: np.ndarray) -> None:
        if self.mmap:
            raise ValueError("this index was loaded memory-mapped (read-only); load it "
                             "without mmap to add vectors")
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def __len__(self) -> int:
        return 0 if self.index_ is None else self.index_.ntotal

    @property
    def dim(self) -> int:
        return self._index.d

    def search(self, queries: np.ndarray, k: int, nprobe: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row positions), best first; positions are -1 where fewer than k exist.
        ``nprobe``: the inverted lists this search scans (an ``ivf`` kind's; default the
        index's own, `probe`), for this call only: concurrent searches may differ."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        index = self._index
        if nprobe is not None and isinstance(index, faiss.IndexIVF):
            params = faiss.SearchParametersIVF()
            params.nprobe = nprobe
            return index.search(q, min(k, len(self)), params=params)
        return index.search(q, min(k, len(self)))

    def vectors(self) -> np.ndarray:
        """The indexed vectors, in row order (what the subject export writes); approximate
        (decoded) for the compressed kinds."""
        return self._row_mapped().reconstruct_n(0, len(self))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The vectors of rows ``ids`` (decoded: approximate for the compressed kinds)."""
        return self._row_mapped().reconstruct_batch(np.ascontiguousarray(ids, np.int64))

    def _row_mapped(self) -> faiss.Index:
        """The index, able to give back its rows: an inverted-list index builds its map from
        row to list once (8 bytes a row: 2.3 MB for the 283,000 rows of the GND's label
        index); rows added later join it."""
        index = self._index
        if isinstance(index, faiss.IndexIVF) and not self._mapped:
            # threads of one batch's parts ask at once: faiss marks the map made before it
            # fills it, so the flag, not the map's type, says when it can be read
            with self._direct_map:
                if not self._mapped:
                    if index.direct_map.type == 0:  # faiss.DirectMap.NoMap
                        index.make_direct_map()  # every later `add` keeps it
                    self._mapped = True
        return index

    def config(self) -> dict:
        return {"kind": self.kind, "hnsw_m": self.hnsw_m, "ef_search": self.ef_search,
                "nprobe": self.nprobe, "nlist": self.nlist, "pq_m": self.pq_m,
                "pq_bits": self.pq_bits, "min_ivf": self.min_ivf,
                "faiss_type": type(self.index_).__name__, "dim": self.dim,
                "ntotal": len(self)}

    def save(self, path: Path) -> None:
        with atomic_dir(Path(path)) as tmp:
            faiss.write_index(self._index, str(tmp / "index.faiss"))
            write_json_atomic(tmp / "index.json", self.config())

    @classmethod
    def load(cls, path: Path, dim: int | None = None, mmap: bool = False) -> VectorIndex:
        """Load a saved index; refuses one whose file does not match its config (kind,
        dimension, size) or, given ``dim``, vectors of another dimension than the encoder's.

        ``mmap``: map the vectors (flat) or inverted lists (IVF kinds) from the file instead of
        reading them into memory: pages load on first use, stay evictable, and processes on one
        machine (Ray workers) share them. Such an index is read-only (`add` refuses)."""
        path = Path(path)
        meta = read_json(path / "index.json")
        self = cls(meta["kind"], meta["hnsw_m"], meta["ef_search"], meta.get("nprobe", 24),
                   nlist=meta.get("nlist"), pq_m=meta.get("pq_m"),
                   pq_bits=meta.get("pq_bits", 8), min_ivf=meta.get("min_ivf", 10_000))
        flags = 0
        if mmap:  # IVF: map the inverted lists; flat codes: map the code array
            ivf = meta.get("faiss_type", "").startswith("IndexIVF") or (
                "faiss_type" not in meta and meta["kind"] in IVF_KINDS)
            flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if ivf else \
                faiss.IO_FLAG_MMAP_IFC
        self.index_ = faiss.read_index(str(path / "index.faiss"), flags)
        self.mmap = mmap
        got = type(self.index_)
        if not isinstance(self.index_, FAISS_TYPES[self.kind]) or (
                "faiss_type" in meta and got.__name__ != meta["faiss_type"]):
            raise ValueError(f"{path / 'index.faiss'}: holds a faiss {got.__name__}, but "
                             f"{path / 'index.json'} says kind {self.kind!r}"
                             f" ({meta.get('faiss_type', 'no faiss type')}); rebuild the index")
        for key, have in (("dim", self.index_.d), ("ntotal", self.index_.ntotal)):
            if key in meta and meta[key] != have:
                raise ValueError(f"{path / 'index.faiss'}: {key} {have} does not match "
                                 f"{meta[key]} in {path / 'index.json'}; rebuild the index")
        if dim is not None and dim != self.index_.d:
            raise ValueError(f"{path}: index vectors have dimension {self.index_.d}, the "
                             f"encoder gives {dim}; the index belongs to another model")
        if isinstance(self.index_, faiss.IndexHNSW):
            self.index_.hnsw.efSearch = self.ef_search
        if isinstance(self.index_, faiss.IndexIVF):
            self.index_.nprobe = self.nprobe
            invlists = self.index_.invlists  # None only in faiss's annotation
            lists = None if invlists is None else faiss.downcast_InvertedLists(invlists)
            if isinstance(lists, faiss.OnDiskInvertedLists):
                # mapped lists: faiss starts 32 threads per search to prefetch the lists it
                # will scan (meant for slow disks) — 10× the search time of a 90k-vector
                # index here (2 ms vs 0.2); the kernel pages them in on first touch anyway
                lists.prefetch_nthread = 0
        return self
