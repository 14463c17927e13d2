"""Heads as sentence-transformers-style modules: an ``nn.Module`` whose ``save`` writes a
folder with ``config.json`` (constructor arguments) and ``model.safetensors`` (weights), and
whose ``load`` classmethod rebuilds it without pickle — so a trained pipeline is one folder.

Example::

    head = DimensionAttentionHead(512)
    head.save("model/head")
    same = DimensionAttentionHead.load("model/head")
    subject_vectors = same.transform(S, batch_size=512, show_progress=True)  # numpy → numpy
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from tagalign.encode.base import log_progress

H = TypeVar("H", bound="Head")
log = logging.getLogger(__name__)



#: ``subject_space`` → (do subjects pass through the head in training, in the index)
SUBJECT_SPACES: dict[str, tuple[bool, bool]] = {"fixed": (False, False),
                                                "siamese": (True, True),
                                                "mixed": (False, True)}


def check_subject_space(value: str) -> str:
    if value not in SUBJECT_SPACES:
        raise ValueError(f"subject_space must be one of {sorted(SUBJECT_SPACES)}, not {value!r}")
    return value


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)

def zero_last_layer(mlp: nn.Sequential) -> None:
    """Start the last Linear of ``mlp`` at zero: a residual head begins as the identity."""
    last = [m for m in mlp if isinstance(m, nn.Linear)][-1]
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)


class Head(nn.Module):
    config_keys: tuple[str, ...] = ()

    def get_config_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.config_keys}

    def save(self, output_path: str | Path) -> None:
        out = Path(output_path)
        out.mkdir(parents=True, exist_ok=True)
        config = {"class": type(self).__name__, **self.get_config_dict()}
        (out / "config.json").write_text(json.dumps(config, indent=1))
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
                  str(out / "model.safetensors"))

    @classmethod
    def load(cls: type[H], input_path: str | Path) -> H:
        path = Path(input_path)
        config = json.loads((path / "config.json").read_text())
        saved_as = config.pop("class", cls.__name__)
        if saved_as != cls.__name__:
            raise ValueError(f"{path} holds a {saved_as}, not a {cls.__name__}")
        head = cls(**config)
        head.load_state_dict(load_file(str(path / "model.safetensors")))
        head.eval()
        return head

    @torch.no_grad()
    def transform(self, x: np.ndarray, batch_size: int = 512, show_progress: bool = False,
                  device: str | torch.device = "cpu",
                  description: str = "transforming") -> np.ndarray:
        """Numpy in, numpy out: batched, in eval mode, without gradients.

        This is how the recipes cache S' = transform(S) for all subjects once. The NBF head
        attends over d tokens per vector, so 204k subjects take minutes on one CPU core
        (measured in the recipe benchmark); ``show_progress`` logs the rate.
        """
        was_training = self.training
        self.eval()
        self.to(device)
        out = np.empty((len(x), self.output_dim), dtype=np.float32)
        t0 = time.perf_counter()
        report = log_progress(log, description, len(x)) if show_progress else None
        for i in range(0, len(x), batch_size):
            batch = torch.from_numpy(np.ascontiguousarray(x[i:i + batch_size],
                                                          dtype=np.float32))
            out[i:i + len(batch)] = self(batch.to(device)).float().cpu().numpy()
            if report is not None:
                report(i + len(batch))
        if show_progress and len(x):
            seconds = time.perf_counter() - t0
            log.info(f"{description}: {len(x)} vectors in {seconds:.1f} s "
                        f"({len(x) / max(seconds, 1e-9):.0f}/s)")
        self.to("cpu")
        self.train(was_training)
        return out

    @property
    def output_dim(self) -> int:
        return int(self.dim)
