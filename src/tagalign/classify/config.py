"""The classify recipes' parameters: one typed config per recipe (`tagalign.params.PartConfig`),
each default written once, on its field, in the order a saved model's manifest lists them.

A recipe names its config as its ``config_class`` (`tagalign.model_files.ModelFamily`): its
published ``defaults`` and ``ranges`` are derived from the fields and its code reads
``self.config``. Importable without scikit-learn or torch, so `tagalign classify train`
refuses a bad ``--param`` before anything loads::

    get_classifier("linear", C=2.0).config.C          # 2.0
    LinearNgramsConfig().char_ngrams                  # [2, 5]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import Field

from tagalign.classify.stacker import KINDS
from tagalign.errors import InputError
from tagalign.params import NonNegative, NonNegativeFloat, PartConfig, Positive, PositiveFloat

#: the stack's name in the classify registry (its text model must be another recipe)
STACK = "subjects-stack"


@dataclass(frozen=True)
class LogisticConfig(PartConfig):
    """TF-IDF and one-vs-rest logistic regression: the fields `linear` and `linear-ngrams`
    share (each adds its own, then ``limit_train`` and ``seed``)."""

    #: the inverse regularisation strength of each label's logistic regression
    C: PositiveFloat = 4.0
    min_df: Positive = 2
    max_df: Annotated[float, Field(gt=0, le=1)] = 0.5
    max_iter: Positive = 1000

    kind: ClassVar[str] = "classifier config"


@dataclass(frozen=True)
class LinearConfig(LogisticConfig):
    """`linear`'s parameters (`tagalign.classify.linear.LinearClassifier`)."""

    #: a seeded sample of this many training records (None: all)
    limit_train: Positive | None = None
    seed: NonNegative = 0


@dataclass(frozen=True)
class LinearNgramsConfig(LogisticConfig):
    """`linear-ngrams`' parameters (`tagalign.classify.ngrams.NgramLinearClassifier`):
    `linear`'s and its word bigrams and character n-grams."""

    #: 1: words; 2: words and their bigrams
    word_ngrams: int = 2
    #: the first characters of the text whose character n-grams are features (0: none)
    char_chars: int = 200
    #: [min, max] length of the character n-grams
    char_ngrams: list[int] = field(default_factory=lambda: [2, 5])
    #: None, or "balanced"
    class_weight: str | None = None
    limit_train: Positive | None = None
    seed: NonNegative = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.word_ngrams not in (1, 2):
            raise InputError("recipe 'linear-ngrams': word_ngrams must be 1 or 2")
        lo_hi = self.char_ngrams
        if not (isinstance(lo_hi, list | tuple) and len(lo_hi) == 2
                and 1 <= int(lo_hi[0]) <= int(lo_hi[1])):
            raise InputError("recipe 'linear-ngrams': char_ngrams must be [min, max], "
                             "1 <= min <= max")
        if self.char_chars < 0:
            raise InputError("recipe 'linear-ngrams': char_chars must be >= 0")
        if self.class_weight not in (None, "balanced"):
            raise InputError("recipe 'linear-ngrams': class_weight must be null or "
                             "'balanced'")


@dataclass(frozen=True)
class LabelContrastiveConfig(PartConfig):
    """`label-contrastive`'s parameters (mCPT, `tagalign.classify.label_contrastive`)."""

    base_model: str = "e5-small"
    max_seq_length: Positive = 256
    batch_size: Positive = 26
    lr_head: PositiveFloat = 1e-3
    lr_body: PositiveFloat = 2e-5
    #: the weight of the contrastive loss beside the BCE
    alpha: NonNegativeFloat = 0.01
    temperature: PositiveFloat = 1.0
    hidden: Positive = 256
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.5
    epochs_head: NonNegative = 10
    epochs_contrastive: NonNegative = 50
    epochs_post: NonNegative = 10
    contrastive: bool = True
    contrast_sampler: bool = False
    per_language: bool = True
    #: the target languages of phase 2 (None: those of train)
    languages: list[str] | None = None
    min_language_records: Positive = 1
    #: fine-tune only the top N transformer layers (None: all)
    train_layers: NonNegative | None = None
    limit_train: Positive | None = None
    encode_batch_size: Positive = 64
    seed: NonNegative = 0

    kind: ClassVar[str] = "classifier config"


@dataclass(frozen=True)
class SubjectStackConfig(PartConfig):
    """`subjects-stack`'s parameters (`tagalign.classify.stack.SubjectStackClassifier`)."""

    #: the text classifier and its parameters
    text_recipe: str = "linear-ngrams"
    text_params: dict[str, Any] = field(default_factory=dict)
    #: suggestions per record the stacker reads
    top_k: Positive = 20
    neighbours: bool = True
    neighbour_k: int = 30
    neighbour_power: float = 2.0
    #: the stacker (`tagalign.classify.stacker.KINDS`) and its settings
    stacker: str = "lightgbm"
    rounds: int = 300
    learning_rate: float = 0.05
    leaves: int = 15
    C: PositiveFloat = 1.0
    bag: Positive = 5
    folds: int = 5
    #: the subject project's held-out training records join the stacker's
    held_out: bool = True
    seed: NonNegative = 0

    kind: ClassVar[str] = "classifier config"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stacker not in KINDS:
            raise InputError(f"recipe 'subjects-stack': stacker must be one of {KINDS}")
        if int(self.folds) < 2:
            raise InputError("recipe 'subjects-stack': folds must be at least 2")
        if self.text_recipe == STACK:
            raise InputError("recipe 'subjects-stack': text_recipe must be a text classifier")
