"""Ordinal pair scoring (graded word-in-context, XL-DURel recipe R4 `ordinal-wic`):
data (CoMeDi/WiC loaders) → model (bi-encoder, training) → thresholds → metrics."""

from tagalign.pairs.data import Pair, Use, load_comedi, load_pairs, load_wic_jsonl
from tagalign.pairs.metrics import evaluate, krippendorff_alpha, spearman
from tagalign.pairs.thresholds import Thresholds

__all__ = ["Pair", "Thresholds", "Use", "evaluate", "krippendorff_alpha", "load_comedi",
           "load_pairs", "load_wic_jsonl", "spearman"]
