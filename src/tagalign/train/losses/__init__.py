"""Losses written by hand because sentence-transformers lacks them (one per module)."""

from tagalign.train.losses.infonce import InfoNCELoss
from tagalign.train.losses.margin import MarginLoss, MultipleNegativesMarginLoss

__all__ = ["InfoNCELoss", "MarginLoss", "MultipleNegativesMarginLoss"]
