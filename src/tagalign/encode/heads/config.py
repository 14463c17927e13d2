"""`HeadTrainingConfig`: how a head is trained over frozen embeddings (the loop is
`tagalign.train.head_training.train_head`), importable without the training stack: the
recipes that train heads (`nbf-attention`, `focused-transform`) compose it into their own
configs, and suggesting with a trained one never enters `tagalign.train`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tagalign.encode.heads.base import SUBJECT_SPACES, check_subject_space
from tagalign.params import NonNegative, NonNegativeFloat, PartConfig, Positive, PositiveFloat


@dataclass(frozen=True)
class HeadTrainingConfig(PartConfig):
    """Hyperparameters of `train_head` (NBF's, R2's, published training; each recipe's
    config says where it departs)."""

    negatives: Positive = 15
    margin: NonNegativeFloat = 0.2
    optimizer: str = "adamw"        # "adamw" (NBF) or "adam" (LLMs4Subjects)
    lr: PositiveFloat = 1e-4
    weight_decay: NonNegativeFloat = 0.0
    scheduler: str = "cosine"       # "cosine" (T_max, eta_min) or "step" (step_size, gamma)
    t_max: Positive | None = None   # None: the number of epochs
    eta_min: NonNegativeFloat = 1e-6
    step_size: Positive = 5
    gamma: PositiveFloat = 0.5
    epochs: Positive = 20
    batch_size: Positive = 4
    seed: NonNegative = 13
    device: str = "cpu"             # "cpu", "cuda" or "auto"
    subject_space: str = "fixed"    # see SUBJECT_SPACES
    # issue 21 (not in the papers; 0 = the papers' training):
    hard_negatives: int = 0         # of the K negatives, how many come from the raw
    hard_pool: int = 50             # encoder's own top-``hard_pool`` non-gold subjects
    val_fraction: float = 0.0       # early stopping: a seeded slice of the records held out,
    patience: int = 0               # scored each epoch; the best epoch's head is kept

    kind: ClassVar[str] = "head training config"

    @property
    def siamese(self) -> bool:
        """Do positives and negatives pass through the head in training?"""
        return SUBJECT_SPACES[check_subject_space(self.subject_space)][0]
