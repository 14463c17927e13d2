"""Embedding cache keyed by (encoder fingerprint, kind, text hash).

Each (fingerprint, kind) folder holds append-only shards: ``part-<id>.npy`` (float32
vectors, memory-mapped on read) and ``part-<id>.keys.npy`` (their text hashes), the keys
written last so a shard counts only once complete. Re-running a recipe never re-encodes
the 204,569 subjects or 90k records; a slow encoding commits a shard every
``checkpoint_s`` seconds, so an interrupted run keeps what it did. Writers never touch
another's files (unique shard names), so concurrent processes can share one cache; many
shards are merged into one. Duplicate keys across shards are harmless (first one wins).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tagalign.encode.base import Encoder, Kind, log_progress
from tagalign.io import save_npy_atomic

log = logging.getLogger(__name__)
KEY_DTYPE = "S24"


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest().encode()


class EmbeddingCache:
    """``encode(encoder, texts)`` returns what ``encoder.encode`` would, encoding only texts
    not seen before with this encoder fingerprint and kind."""

    def __init__(self, root: Path | str, checkpoint_s: float = 60.0, max_shards: int = 16):
        self.root = Path(root)
        self.checkpoint_s = checkpoint_s
        self.max_shards = max_shards
        self.encoded = 0  # texts actually sent to an encoder (for tests and reports)
        self.last_rate: float | None = None  # texts/s of the last encoding
        self._loaded: dict[Path, tuple[tuple[str, ...], dict, list[np.ndarray]]] = {}

    def folder(self, encoder: Encoder, kind: Kind) -> Path:
        return self.root / f"{encoder.fingerprint}-{kind}"

    # -- reading ---------------------------------------------------------------------------
    @staticmethod
    def _shards(folder: Path) -> list[Path]:
        """Completed shards (their keys file exists), oldest first."""
        if not folder.is_dir():
            return []
        return sorted(folder.glob("part-*.keys.npy"))

    def _load(self, folder: Path) -> tuple[dict[bytes, tuple[int, int]], list[np.ndarray]]:
        """Key → (shard, row), and the memory-mapped shards; reused while the folder's
        shard list is unchanged (a served request must not rebuild a 90k-key dict)."""
        shards = self._shards(folder)
        names = tuple(f.name for f in shards)
        hit = self._loaded.get(folder)
        if hit is not None and hit[0] == names:
            return hit[1], hit[2]
        for attempt in range(3):  # a concurrent merge may delete shards while we list them
            try:
                index: dict[bytes, tuple[int, int]] = {}
                arrays = []
                for s, keys_file in enumerate(shards):
                    keys = np.load(keys_file, allow_pickle=False)
                    vectors = np.load(_vectors_of(keys_file), mmap_mode="r", allow_pickle=False)
                    if len(vectors) < len(keys):
                        raise ValueError(f"{keys_file}: {len(keys)} keys, {len(vectors)} rows")
                    arrays.append(vectors)
                    for row, k in enumerate(keys.tolist()):
                        index.setdefault(k, (s, row))
                self._loaded[folder] = (names, index, arrays)
                return index, arrays
            except FileNotFoundError:
                if attempt == 2:
                    raise
                time.sleep(0.2)
                shards = self._shards(folder)
                names = tuple(f.name for f in shards)
        raise AssertionError("unreachable")

    @staticmethod
    def _gather(index: dict[bytes, tuple[int, int]], arrays: list[np.ndarray],
                keys: list[bytes], dim: int) -> np.ndarray:
        out = np.empty((len(keys), dim), np.float32)
        where = np.array([index[k] for k in keys], dtype=np.int64).reshape(-1, 2)
        for s, vectors in enumerate(arrays):
            mine = np.flatnonzero(where[:, 0] == s)
            if len(mine):
                rows = where[mine, 1]
                order = np.argsort(rows)  # sorted reads are kinder to the page cache
                out[mine[order]] = vectors[rows[order]]
        return out

    # -- writing ---------------------------------------------------------------------------
    def _commit(self, folder: Path, keys: list[bytes], vectors: np.ndarray) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"part-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        save_npy_atomic(stem.with_name(stem.name + ".npy"), np.asarray(vectors, np.float32))
        save_npy_atomic(stem.with_name(stem.name + ".keys.npy"), np.array(keys, KEY_DTYPE))

    def _merge(self, folder: Path, dim: int) -> None:
        """Fold all shards into one (keeps reads fast after many checkpoints)."""
        shards = self._shards(folder)
        index, arrays = self._load(folder)
        keys = list(index)
        self._commit(folder, keys, self._gather(index, arrays, keys, dim))
        for keys_file in shards:
            keys_file.unlink(missing_ok=True)
            _vectors_of(keys_file).unlink(missing_ok=True)

    # -- the API ---------------------------------------------------------------------------
    def encode(self, encoder: Encoder, texts: Sequence[str], *, kind: Kind = "passage",
               batch_size: int = 64, show_progress: bool = True, store: bool = True
               ) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised; ``store=False`` encodes what is missing
        without writing it (single queries at serving time)."""
        folder = self.folder(encoder, kind)
        index, arrays = self._load(folder)
        keys = [text_key(t) for t in texts]
        todo: dict[bytes, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in index and k not in todo:
                todo[k] = t
        if not todo:
            return self._gather(index, arrays, keys, encoder.dim)
        new = self._encode_missing(encoder, folder, todo, kind, batch_size, show_progress,
                                   store)
        if not store:
            out = np.empty((len(keys), encoder.dim), np.float32)
            cached = [i for i, k in enumerate(keys) if k in index]
            out[cached] = self._gather(index, arrays, [keys[i] for i in cached], encoder.dim)
            row = {k: i for i, k in enumerate(todo)}
            fresh = [i for i, k in enumerate(keys) if k not in index]
            out[fresh] = new[[row[keys[i]] for i in fresh]]
            return out
        if len(self._shards(folder)) > self.max_shards:
            self._merge(folder, encoder.dim)
        index, arrays = self._load(folder)
        return self._gather(index, arrays, keys, encoder.dim)

    def _encode_missing(self, encoder: Encoder, folder: Path, todo: dict[bytes, str],
                        kind: Kind, batch_size: int, show_progress: bool, store: bool
                        ) -> np.ndarray:
        """Encode ``todo`` in chunks, committing a shard every ``checkpoint_s`` seconds."""
        items = list(todo.items())
        chunk = max(batch_size, 1) * 8
        done: list[np.ndarray] = []
        pending_keys: list[bytes] = []
        pending: list[np.ndarray] = []
        t0 = last_commit = time.perf_counter()
        report = log_progress(log, f"encoding ({encoder.name}, {kind})", len(items)) \
            if show_progress else None
        for start in range(0, len(items), chunk):
            part = items[start:start + chunk]
            vec = encoder.encode([t for _, t in part], kind=kind, batch_size=batch_size)
            self.encoded += len(part)
            pending_keys += [k for k, _ in part]
            pending.append(vec)
            n_done = start + len(part)
            if report is not None:
                report(n_done)
            last = n_done == len(items)
            if last or time.perf_counter() - last_commit > self.checkpoint_s:
                block = np.vstack(pending)
                if store:
                    self._commit(folder, pending_keys, block)
                done.append(block)
                pending_keys, pending = [], []
                last_commit = time.perf_counter()
        seconds = time.perf_counter() - t0
        self.last_rate = len(items) / max(seconds, 1e-9)
        if show_progress:
            log.info(f"encoded {len(items):,} texts with {encoder.name} ({kind}) in "
                        f"{seconds:.1f} s ({self.last_rate:,.1f} texts/s)")
        return np.vstack(done)


def _vectors_of(keys_file: Path) -> Path:
    return keys_file.with_name(keys_file.name.removesuffix(".keys.npy") + ".npy")
