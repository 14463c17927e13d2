"""`ynu-finetune` (R1) — YNU-HPCC: a fine-tuned Sentence-BERT bi-encoder with InfoNCE.

Pairs with 1:1 positive:negative balance, negatives drawn uniformly from the subjects seen
in train minus the record's gold. Sampling schemes: ``aggregate`` (the record vs all its
gold subjects joined, and vs as many random wrong ones joined) and ``instance`` (each gold
subject vs one random wrong subject). Loss `InfoNCELoss` over K=2 candidates, learnable
τ from 0.05. Defaults: AdamW lr 2e-5, batch 32 (aggregate) / 16 (instance), 3 epochs.
Subject text: name + alternate names. Base model: the offline multilingual e5-small.
``train_layers`` (default: all) freezes the lower layers — a CPU budget knob.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.encode import subject_texts
from tagalign.encode.base import Encoder
from tagalign.encode.transformer import (
    STEncoder,
    base_model_path,
    default_device,
    freeze_lower_layers,
)
from tagalign.errors import InputError
from tagalign.io import read_json, write_json_atomic
from tagalign.params import NonNegative, Positive, PositiveFloat
from tagalign.recipes.base import register_recipe
from tagalign.recipes.dense import DenseConfig, DenseRecipe
from tagalign.records import Record
from tagalign.runtime import quiet_libraries


@dataclass(frozen=True)
class YNUConfig(DenseConfig):
    """R1's parameters: the dense ones (``encoder``, ``with_alt_labels`` and
    ``max_seq_length`` with R1's defaults), then its training's; ``batch_size`` None: 32
    (aggregate) or 16 (instance)."""

    encoder: str = "finetuned"
    with_alt_labels: bool = True
    max_seq_length: Positive = 256  # R1's cap: never None
    base_model: str = "e5-small"
    scheme: str = "aggregate"
    lr: PositiveFloat = 2e-5
    batch_size: Positive | None = None
    epochs: Positive = 3
    temperature: PositiveFloat = 0.05
    learnable_temperature: bool = True
    max_train_records: Positive | None = None
    train_layers: NonNegative | None = None
    logging_steps: Positive = 10


@register_recipe
class YNURecipe(DenseRecipe):
    name = "ynu-finetune"
    config_class = YNUConfig
    config: YNUConfig

    def __init__(self, vocab, **params: Any):
        super().__init__(vocab, **params)
        if self.config.scheme not in ("aggregate", "instance"):
            raise InputError("scheme must be 'aggregate' or 'instance'")
        self.model_dir_: Path | None = None
        self.prompts_: dict[str, str] = {}
        self.temperature_: float | None = None  # learned τ

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = STEncoder(str(self.model_dir_), prompts=self.prompts_,
                                      max_seq_length=self.config.max_seq_length)
        return self._encoder

    def training_triplets(self, records: Sequence[Record], seen: np.ndarray | None = None
                          ) -> dict[str, list[str]]:
        """(anchor, positive, negative) texts for the chosen sampling scheme; negatives are
        drawn uniformly from ``seen`` (default: the subjects of ``records``) minus gold."""
        rng = np.random.default_rng(self.config.seed)
        texts = subject_texts(self.vocab, self.config.subject_language,
                              self.config.with_alt_labels)
        if seen is None:
            seen = np.array(sorted({p for r in records
                                    for p in self.vocab.positions(r.subjects)}))
        q, p = self.prompts_.get("query", ""), self.prompts_.get("passage", "")
        cols: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}

        def wrong(gold: set[int], n: int) -> list[int]:
            out: list[int] = []
            while len(out) < n:
                c = int(seen[rng.integers(len(seen))])
                if c not in gold:
                    out.append(c)
            return out

        for r in records:
            gold = self.vocab.positions(r.subjects)
            if not gold or len(seen) <= len(set(gold)):  # gold ⊆ seen: no wrong subject left
                continue
            if self.config.scheme == "aggregate":
                pairs = [("; ".join(texts[g] for g in gold),
                          "; ".join(texts[w] for w in wrong(set(gold), len(gold))))]
            else:
                pairs = [(texts[g], texts[w]) for g, w in zip(gold, wrong(set(gold), len(gold)),
                                                              strict=True)]
            for pos, neg in pairs:
                cols["anchor"].append(q + r.text)
                cols["positive"].append(p + pos)
                cols["negative"].append(p + neg)
        return cols

    def fit(self, records: Sequence[Record], *, workdir: Path) -> None:
        import torch
        from datasets import Dataset
        from sentence_transformers import (
            SentenceTransformer,
            SentenceTransformerTrainingArguments,
        )

        from tagalign.train.losses import InfoNCELoss
        from tagalign.train.progress import quiet_trainer_class, train_with_progress

        p = self.config
        records = [r for r in records if r.subjects]
        positions = self.subject_positions(records)  # "seen" means seen in all of train
        seen = np.array(sorted({q for r in records for q in self.vocab.positions(r.subjects)}))
        records = records[: p.max_train_records]
        base, self.prompts_ = base_model_path(p.base_model)
        quiet_libraries()
        torch.manual_seed(p.seed)
        model = SentenceTransformer(base, device=default_device())
        model.max_seq_length = p.max_seq_length
        if p.train_layers is not None:
            freeze_lower_layers(model, int(p.train_layers))
        if not self.prompts_:  # a local base folder may carry its own query/passage prompts
            self.prompts_ = {k: v for k, v in (model.prompts or {}).items()
                             if k in ("query", "passage") and v}
        data = Dataset.from_dict(self.training_triplets(records, seen)).shuffle(seed=p.seed)
        batch = p.batch_size or (32 if p.scheme == "aggregate" else 16)
        loss = InfoNCELoss(model, p.temperature, p.learnable_temperature)
        args = SentenceTransformerTrainingArguments(
            output_dir=str(workdir / "ynu-checkpoints"), num_train_epochs=p.epochs,
            per_device_train_batch_size=batch, learning_rate=p.lr, save_strategy="no",
            report_to="none", logging_steps=p.logging_steps, seed=p.seed,
            use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0)
        trainer = quiet_trainer_class()(model=model, args=args, train_dataset=data,
                                             loss=loss)
        result = train_with_progress(trainer, "fine-tuning")
        self.losses_ = [h["loss"] for h in trainer.state.log_history if "loss" in h] or \
            [float(result.training_loss)]
        self.temperature_ = loss.temperature
        self.model_dir_ = workdir / "ynu-model"
        model.save(str(self.model_dir_), safe_serialization=True, create_model_card=False)
        self._encoder = None
        self.positions_ = positions
        self.build_index(self.encode_subjects(self.positions_))

    def _save_state(self, path: Path) -> None:
        super()._save_state(path)
        shutil.copytree(self._trained(self.model_dir_), path / "model")

        write_json_atomic(path / "ynu.json", {"prompts": self.prompts_,
                                              "temperature": self.temperature_})

    def _load_state(self, path: Path, *, mmap: bool = False) -> None:
        super()._load_state(path, mmap=mmap)

        self.model_dir_ = path / "model"
        meta = read_json(path / "ynu.json")
        self.prompts_ = meta["prompts"]
        self.temperature_ = meta.get("temperature")
