"""Save/load for heads like sentence-transformers modules: a folder with config.json and
model.safetensors, loaded without pickle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn


class Head(nn.Module):
    config_keys: tuple[str, ...] = ()

    def get_config_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.config_keys}

    def save(self, output_path: str | Path) -> None:
        out = Path(output_path)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(self.get_config_dict(), indent=1))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()},
                  str(out / "model.safetensors"))

    @classmethod
    def load(cls, input_path: str | Path) -> Head:
        path = Path(input_path)
        head = cls(**json.loads((path / "config.json").read_text()))
        head.load_state_dict(load_file(str(path / "model.safetensors")))
        head.eval()
        return head

    @torch.no_grad()
    def transform(self, x, batch_size: int = 1024):
        """Numpy in, numpy out, batched, no gradients (for caching subject vectors)."""
        import numpy as np

        self.eval()
        out = [self(torch.from_numpy(np.ascontiguousarray(x[i:i + batch_size]))).numpy()
               for i in range(0, len(x), batch_size)]
        return np.vstack(out) if out else np.zeros((0, x.shape[1]), np.float32)
