"""`focused-transform` (R3) — FocusedEmbTransform heads, margin triplet loss, FAISS.

``mode="per-language"`` (the original): separate English and German models; the English
one matches English subject labels (German where none), records are routed by language.
``mode="bilingual"``: one model for both. Subjects are transformed once and indexed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.index import VectorIndex
from tagalign.io import read_json, write_json_atomic
from tagalign.records import Record
from tagalign.suggest import Suggestion
from tagalign.train.heads import FocusedEmbTransform
from tagalign.train.recipes.base import register_recipe
from tagalign.train.recipes.dense import DENSE_DEFAULTS
from tagalign.train.recipes.nbf import NBFRecipe


@register_recipe
class FocusedRecipe(NBFRecipe):
    name = "focused-transform"
    head_cls = FocusedEmbTransform
    defaults: dict[str, Any] = {**DENSE_DEFAULTS, "mode": "per-language", "hidden": 1024,
                                "negatives": 15, "margin": 0.2, "lr": 1e-3,
                                "weight_decay": 0.0, "t_max": None, "eta_min": 0.0,
                                "batch_size": 64, "epochs": 10, "max_train_records": None,
                                "top_k": 50}

    def __init__(self, vocab, **params: Any):
        super().__init__(vocab, **params)
        if self.params["mode"] not in ("per-language", "bilingual"):
            raise ValueError("mode must be 'per-language' or 'bilingual'")
        self.models_: dict[str, tuple[FocusedEmbTransform, VectorIndex]] = {}

    def new_head(self, dim: int) -> FocusedEmbTransform:
        return FocusedEmbTransform(dim, self.params["hidden"])

    def route(self, record: Record) -> str:
        if self.params["mode"] == "bilingual":
            return "all"
        lang = record.language if record.language in self.models_ else None
        return lang or next(iter(self.models_))

    def fit(self, records: Sequence[Record], *, workdir: Path,
            dev: Sequence[Record] | None = None) -> None:
        records = [r for r in records if r.subjects]
        self.positions_ = self.subject_positions(records)  # seen in all of train
        records = records[: self.params["max_train_records"]]
        emb = self.encode_records(records, progress=True)
        groups = {"all": list(range(len(records)))} if self.params["mode"] == "bilingual" \
            else {lang: [i for i, r in enumerate(records) if (r.language or "de") == lang]
                  for lang in ("de", "en")}
        self.losses_ = []
        for lang, idx in groups.items():
            if not idx:
                continue
            vectors = self.encode_subjects(self.positions_, "de" if lang == "all" else lang)
            head, losses = self._train_on([records[i] for i in idx], emb[idx],
                                          self.positions_, vectors, f"training {lang} head")
            self.losses_ += losses
            t = head.transform(vectors)
            t /= np.linalg.norm(t, axis=1, keepdims=True).clip(1e-12)
            self.models_[lang] = (head, VectorIndex(self.params["index"]).build(t))

    def suggest(self, records: Sequence[Record], limit: int = 20) -> list[list[Suggestion]]:
        if not self.models_:
            raise RuntimeError("focused-transform is not trained")
        emb = self.encode_records(records)
        out: list[list[Suggestion]] = [[] for _ in records]
        routes = [self.route(r) for r in records]
        for key, (head, index) in self.models_.items():
            idx = [i for i, k in enumerate(routes) if k == key]
            if idx:
                rows = self.search(index, self.positions_, head.transform(emb[idx]), limit,
                                   [records[i].language for i in idx])
                for i, row in zip(idx, rows, strict=True):
                    out[i] = row
        return out

    def save(self, path: Path) -> None:
        from tagalign.io import save_npy_atomic

        save_npy_atomic(path / "positions.npy", self.positions_)
        for key, (head, index) in self.models_.items():
            head.save(path / f"head-{key}")
            index.save(path / f"index-{key}")
        write_json_atomic(path / "focused.json", {"models": list(self.models_),
                                                  "losses": self.losses_})

    def load_state(self, path: Path) -> None:
        from tagalign.io import load_npy

        self.positions_ = load_npy(path / "positions.npy")
        meta = read_json(path / "focused.json")
        self.losses_ = meta["losses"]
        for key in meta["models"]:
            self.models_[key] = (FocusedEmbTransform.load(path / f"head-{key}"),
                                 VectorIndex.load(path / f"index-{key}"))
