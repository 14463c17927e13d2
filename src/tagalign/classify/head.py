"""The mCPT classification head: dense 256 → ReLU → dropout 0.5 → one logit per class.

The sigmoid is applied by the loss (``BCEWithLogitsLoss``, numerically stable) and by
`ClassifierHead.probabilities`. Saved as safetensors + a JSON config (no pickle).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from tagalign.io import read_json, write_bytes_atomic, write_json_atomic


class ClassifierHead(nn.Module):
    def __init__(self, in_dim: int, n_classes: int, hidden: int = 256, dropout: float = 0.5):
        super().__init__()
        self.config = {"in_dim": in_dim, "n_classes": n_classes, "hidden": hidden,
                       "dropout": dropout}
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, n_classes))

    def forward(self, embeddings: Tensor) -> Tensor:
        """(B, in_dim) → (B, n_classes) logits."""
        return self.net(embeddings)

    @torch.no_grad()
    def probabilities(self, embeddings: Tensor, batch_size: int = 4096) -> Tensor:
        was = self.training
        self.eval()
        out = torch.cat([torch.sigmoid(self(embeddings[i:i + batch_size]))
                         for i in range(0, len(embeddings), batch_size)]) \
            if len(embeddings) else embeddings.new_zeros((0, self.config["n_classes"]))
        self.train(was)
        return out

    def save(self, folder: Path) -> None:
        from safetensors.torch import save

        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        write_bytes_atomic(folder / "head.safetensors", save(state))
        write_json_atomic(folder / "head.json", self.config)

    @classmethod
    def load(cls, folder: Path, device: str = "cpu") -> ClassifierHead:
        from safetensors.torch import load_file

        head = cls(**read_json(folder / "head.json"))
        head.load_state_dict(load_file(str(folder / "head.safetensors"), device=device))
        return head.to(device)
