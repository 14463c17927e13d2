"""Embedding cache keyed by (encoder fingerprint, kind, text hash).

Vectors live in a memory-mapped ``vectors.npy`` next to a small ``keys.json`` of text
hashes, so re-running a recipe never re-encodes the 204,569 subjects or 90k records.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rich.console import Console

from tagalign.encode.base import Encoder, Kind
from tagalign.io import read_json, save_npy_atomic, write_json_atomic

console = Console(stderr=True)


def text_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


class EmbeddingCache:
    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.encoded = 0  # texts actually sent to an encoder (for tests and reports)

    def _folder(self, encoder: Encoder, kind: Kind) -> Path:
        return self.root / f"{encoder.fingerprint}-{kind}"

    def _load(self, folder: Path) -> tuple[dict[str, int], np.ndarray | None]:
        if not (folder / "keys.json").exists():
            return {}, None
        keys = read_json(folder / "keys.json")
        vectors = np.load(folder / "vectors.npy", mmap_mode="r", allow_pickle=False)
        return {k: i for i, k in enumerate(keys)}, vectors

    def encode(self, encoder: Encoder, texts: Sequence[str], *, kind: Kind = "passage",
               batch_size: int = 64, show_progress: bool = True) -> np.ndarray:
        folder = self._folder(encoder, kind)
        index, vectors = self._load(folder)
        keys = [text_key(t) for t in texts]
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in index and k not in todo:
                todo[k] = t
        if todo:
            t0 = time.perf_counter()
            new = encoder.encode(list(todo.values()), kind=kind, batch_size=batch_size,
                                 show_progress=show_progress)
            seconds = time.perf_counter() - t0
            self.encoded += len(todo)
            if show_progress:
                console.log(f"encoded {len(todo)} texts with {encoder.name} in {seconds:.1f} s "
                            f"({len(todo) / max(seconds, 1e-9):.0f} texts/s)")
            old_keys = sorted(index, key=index.__getitem__)
            allv = new if vectors is None else np.vstack([np.asarray(vectors), new])
            folder.mkdir(parents=True, exist_ok=True)
            save_npy_atomic(folder / "vectors.npy", allv.astype(np.float32))
            write_json_atomic(folder / "keys.json", old_keys + list(todo))
            index, vectors = self._load(folder)
        if not keys:
            return np.zeros((0, encoder.dim), np.float32)
        return np.asarray(vectors[[index[k] for k in keys]], dtype=np.float32)
