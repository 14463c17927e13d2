"""Losses of the ordinal-wic recipe (all from sentence-transformers), selectable by name.

Each entry maps an ordinal label 1..4 to the target its loss expects (methods.md, R4):

- ``contrastive``: binary, 1,2 → 0 and 3,4 → 1 (a median of 2.5 has no side and is left
  out); `ContrastiveLoss` on cosine distance.
- ``cosine``: regression of the cosine on 1 → 0, 2 → ⅓, 3 → ⅔, 4 → 1; `CosineSimilarityLoss`.
- ``cosent``: `CoSENTLoss`, ranks pairs by the same ⅓-step scores.
- ``angle`` (default, the published best): `AnglELoss`, CoSENT in angle space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tagalign.registry import Registry


def _graded(label: float) -> float | None:
    return (label - 1.0) / 3.0


def _binary(label: float) -> float | None:
    if label == 2.5:
        return None
    return 1.0 if label > 2.5 else 0.0


@dataclass(frozen=True)
class PairLoss:
    """A named loss: ``build(model)`` → the sentence-transformers loss module, ``target``
    maps an ordinal label to the loss's training label (None: leave the pair out)."""

    name: str
    build: Callable[[Any], Any]
    target: Callable[[float], float | None]


LOSSES: Registry[PairLoss] = Registry("loss")
register_loss = LOSSES.register


def get_loss(name: str) -> PairLoss:
    return LOSSES.lookup(name)


def _st_losses():
    from sentence_transformers.sentence_transformer import losses

    return losses


register_loss(PairLoss("contrastive", lambda m: _st_losses().ContrastiveLoss(m), _binary))
register_loss(PairLoss("cosine", lambda m: _st_losses().CosineSimilarityLoss(m), _graded))
register_loss(PairLoss("cosent", lambda m: _st_losses().CoSENTLoss(m), _graded))
register_loss(PairLoss("angle", lambda m: _st_losses().AnglELoss(m), _graded))
