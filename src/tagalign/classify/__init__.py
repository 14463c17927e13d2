"""Multi-label text classification (record domains and other label sets).

data → model (recipes `linear-ngrams` (the default), `linear` and `label-contrastive`
(mCPT, R5)) → thresholds → metrics. The CLI (`tagalign classify`) is a thin layer over
`get_classifier` / `load_classifier`.
"""

from tagalign.classify import label_contrastive, linear, ngrams  # noqa: F401 - registration
from tagalign.classify.base import (
    CLASSIFIERS,
    Classifier,
    LabelSetMismatch,
    get_classifier,
    load_classifier,
    read_label_set,
)
from tagalign.classify.data import Example, LabelSet, read_examples

DEFAULT_RECIPE = "linear-ngrams"

__all__ = ["CLASSIFIERS", "DEFAULT_RECIPE", "Classifier", "Example", "LabelSet",
           "LabelSetMismatch", "get_classifier", "load_classifier", "read_examples",
           "read_label_set"]
