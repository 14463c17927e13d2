"""Multi-label text classification (record domains and other label sets).

data → model (recipes `linear-ngrams` (the default), `linear`, `label-contrastive`
(mCPT, R5) and `subjects-stack` (text + a subject project's suggestions)) → thresholds
→ metrics. The CLI (`tagalign classify`) is a thin layer over `get_classifier` /
`Classifier.load`.
"""

from tagalign.classify import (  # noqa: F401 - registration
    label_contrastive,
    linear,
    ngrams,
    stack,
)
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
