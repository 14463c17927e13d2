"""`label-contrastive` — mCPT (recipe R5): label-aware contrastive fine-tuning for
multi-label classification with few samples per class.

Model: a multilingual sentence encoder (default the offline e5-small; mean pooling, its
``Normalize`` module dropped: no normalisation) + `ClassifierHead` (dense 256, dropout
0.5, one sigmoid per class). Training, phase by phase (`PHASES`):

1. ``head-pre``: head only, body frozen, BCE, on embeddings encoded once and cached (so
   this phase costs seconds); ``contrastive``: body + head, ``L = BCE + α·HeroCon``
   (α = 0.01), AdamW with lr 1e-3 for the head and 2e-5 for the body, batch 26;
   ``head-post``: head only again on the fine-tuned body's cached embeddings.
2. Per target language (``languages``, default those of train): the three steps again,
   from the phase-1 weights, on that language's records when it has any (at least
   ``min_language_records``), else on all records (zero-shot language transfer). Records
   are routed to their language's model at prediction time; others use the phase-1 one.

``contrast_sampler=True`` builds every batch so that it holds at least one sample of each
class present in the training data (a batch grows beyond ``batch_size`` when the classes
need more records to be covered). Budget knobs for a CPU (not the published recipe):
``train_layers`` (fine-tune only the top N transformer layers), ``max_seq_length``,
``epochs_head`` / ``epochs_contrastive`` / ``epochs_post``, ``limit_train`` (a seeded
subset of train), ``per_language`` (skip phase 2), ``contrastive=False`` (head only on
frozen embeddings: the ablation). Uses CUDA when present.

The training loop is written here rather than with `SentenceTransformerTrainer`: the
recipe needs per-module learning rates, a head outside the encoder, cached-embedding
phases and a custom batch sampler, which the trainer would all need overriding for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.classify.base import Classifier, limit_examples, register_classifier
from tagalign.classify.config import LabelContrastiveConfig
from tagalign.classify.data import Example
from tagalign.classify.head import ClassifierHead
from tagalign.classify.losses import herocon
from tagalign.encode.transformer import base_model_path, default_device, freeze_lower_layers
from tagalign.errors import ModelFormatError
from tagalign.io import read_json, write_json_atomic
from tagalign.runtime import quiet_libraries

PHASES = ("head-pre", "contrastive", "head-post")


def contrast_batches(y: np.ndarray, batch_size: int, rng: np.random.Generator
                     ) -> Iterator[np.ndarray]:
    """One epoch of index batches in which every class with a positive in ``y`` appears:
    for each class not yet covered (random order) a random sample of it is added, then the
    batch is filled up from a shuffled pass over all samples."""
    n = len(y)
    order = rng.permutation(n)
    present = np.flatnonzero(y.sum(0) > 0)
    by_class = {c: np.flatnonzero(y[:, c] > 0) for c in present}
    cursor = 0
    for _ in range(max(1, -(-n // batch_size))):
        batch: list[int] = []
        covered = np.zeros(y.shape[1], bool)
        for c in rng.permutation(present):
            if not covered[c]:
                i = int(rng.choice(by_class[c]))
                batch.append(i)
                covered |= y[i] > 0
        while len(batch) < batch_size:
            batch.append(int(order[cursor % n]))
            cursor += 1
        yield np.array(batch)


def plain_batches(n: int, batch_size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    order = rng.permutation(n)
    for i in range(0, n, batch_size):
        yield order[i:i + batch_size]


@register_classifier
class LabelContrastiveClassifier(Classifier):
    name = "label-contrastive"
    config_class = LabelContrastiveConfig
    config: LabelContrastiveConfig

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.prompt_ = ""
        self.models_: dict[str, tuple[Any, ClassifierHead]] = {}  # "*" and per language
        self.device_: str | None = None

    # -- parts ------------------------------------------------------------------------
    def _base(self):
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules import Normalize


        quiet_libraries()
        self.device_ = default_device()
        path, prompts = base_model_path(self.config.base_model)
        model = SentenceTransformer(path, device=self.device_,
                                    local_files_only=Path(path).is_dir())
        self.prompt_ = prompts.get("query", "")
        mods = [m for m in model if not isinstance(m, Normalize)]
        model = SentenceTransformer(modules=mods, device=self.device_)
        model.max_seq_length = self.config.max_seq_length
        return model

    def _encode(self, body, texts: Sequence[str], what: str):
        """Frozen embeddings (a tensor on the device), in chunks so progress shows."""
        import torch

        body.eval()
        chunk, parts = 1024, []
        with torch.no_grad():
            for i in range(0, len(texts), chunk):
                self._tick(what, i, len(texts))
                parts.append(body.encode([self.prompt_ + t for t in texts[i:i + chunk]],
                                         batch_size=self.config.encode_batch_size,
                                         convert_to_tensor=True, show_progress_bar=False))
        self._tick(what, len(texts), len(texts))
        if not parts:
            return torch.zeros((0, body.get_embedding_dimension()), device=self.device_)
        return torch.cat(parts).float()

    def _batches(self, y: np.ndarray, rng: np.random.Generator) -> Iterator[np.ndarray]:
        if self.config.contrast_sampler:
            return contrast_batches(y, self.config.batch_size, rng)
        return plain_batches(len(y), self.config.batch_size, rng)

    # -- phases -----------------------------------------------------------------------
    def _epochs(self, opt, epochs: int, key: str, y: np.ndarray, rng: np.random.Generator,
                loss_of: Callable[[np.ndarray], Any]) -> None:
        """``epochs`` passes over batches of ``y`` (row indices ``idx``), one optimiser step
        per ``loss_of(idx)``; the mean loss per epoch goes to ``history_[key]``."""
        losses = []
        for epoch in range(epochs):
            total, count = 0.0, 0
            for idx in self._batches(y, rng):
                loss = loss_of(idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, count = total + float(loss.detach()) * len(idx), count + len(idx)
            losses.append(total / max(count, 1))
            self._tick(key, epoch + 1, epochs)
        self.history_[key] = losses

    def _train_head(self, head: ClassifierHead, x, y: np.ndarray, epochs: int, key: str,
                    rng: np.random.Generator) -> None:
        import torch

        opt = torch.optim.AdamW(head.parameters(), lr=self.config.lr_head)
        bce = torch.nn.BCEWithLogitsLoss()
        yt = torch.as_tensor(y, device=self.device_)

        def loss_of(idx: np.ndarray):
            ix = torch.as_tensor(idx, device=self.device_)
            return bce(head(x[ix]), yt[ix])

        head.train()
        self._epochs(opt, epochs, key, y, rng, loss_of)

    def _train_contrastive(self, body, head: ClassifierHead, texts: list[str], y: np.ndarray,
                           key: str, rng: np.random.Generator) -> None:
        import torch
        from sentence_transformers.util import batch_to_device


        c = self.config
        if c.train_layers is not None:
            freeze_lower_layers(body, int(c.train_layers))
        body_params = [q for q in body.parameters() if q.requires_grad]
        opt = torch.optim.AdamW([{"params": body_params, "lr": c.lr_body},
                                 {"params": head.parameters(), "lr": c.lr_head}])
        bce = torch.nn.BCEWithLogitsLoss()

        def loss_of(idx: np.ndarray):
            features = batch_to_device(
                body.preprocess([self.prompt_ + texts[i] for i in idx]), self.device_)
            emb = body(features)["sentence_embedding"]
            yt = torch.as_tensor(y[idx], device=self.device_)
            return bce(head(emb), yt) + c.alpha * herocon(emb, yt, c.temperature)

        body.train()
        head.train()
        self._epochs(opt, c.epochs_contrastive, key, y, rng, loss_of)
        body.eval()

    def _three_steps(self, body, head: ClassifierHead, texts: list[str], y: np.ndarray,
                     scope: str, frozen=None) -> None:
        """head-pre → contrastive → head-post on one slice of the training data."""
        c = self.config
        rng = np.random.default_rng(c.seed)
        x = frozen if frozen is not None else self._encode(body, texts, f"{scope}: encoding")
        self._train_head(head, x, y, c.epochs_head, f"{scope}/head-pre", rng)
        if not c.contrastive:
            return
        self._train_contrastive(body, head, texts, y, f"{scope}/contrastive", rng)
        x = self._encode(body, texts, f"{scope}: re-encoding")
        self._train_head(head, x, y, c.epochs_post, f"{scope}/head-post", rng)

    def _fit(self, train: Sequence[Example], y: np.ndarray) -> None:
        import torch

        c = self.config
        torch.manual_seed(c.seed)
        train, y = limit_examples(train, y, c.limit_train, c.seed)
        body = self._base()
        head = ClassifierHead(body.get_embedding_dimension(), y.shape[1], c.hidden,
                              c.dropout).to(self.device_)
        texts = [ex.text for ex in train]
        frozen = self._encode(body, texts, "all: encoding")
        self._three_steps(body, head, texts, y, "all", frozen)
        self.models_ = {"*": (body, head)}
        if not c.per_language:
            return
        langs = np.array([ex.language or "?" for ex in train])
        targets = c.languages or sorted({lg for lg in langs if lg != "?"})
        for lang in targets:
            mask = langs == lang
            if mask.sum() < c.min_language_records:
                mask = np.ones(len(train), bool)  # no data for it: keep training on all
            torch.manual_seed(c.seed)
            lbody = copy.deepcopy(body) if c.contrastive else body
            lhead = copy.deepcopy(head)
            sub = [texts[i] for i in np.flatnonzero(mask)]
            x = None if c.contrastive else \
                frozen[torch.as_tensor(np.flatnonzero(mask), device=self.device_)]
            self._three_steps(lbody, lhead, sub, y[mask], lang, x)
            self.models_[lang] = (lbody, lhead)

    # -- scoring ----------------------------------------------------------------------
    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        import torch

        out = np.zeros((len(examples), len(self.label_set)), np.float32)
        routed = np.array([ex.language if ex.language in self.models_ else "*"
                           for ex in examples], dtype=object)
        bodies = {id(body): body for body, _ in self.models_.values()}
        for body_id, body in bodies.items():  # encode once per body, then each head
            keys = [k for k, (b, _) in self.models_.items() if id(b) == body_id]
            rows = np.flatnonzero(np.isin(routed, keys))
            if not len(rows):
                continue
            x = self._encode(body, [examples[int(i)].text for i in rows], "scoring")
            for key in keys:
                mine = routed[rows] == key
                if mine.any():
                    sel = torch.as_tensor(np.flatnonzero(mine), device=x.device)
                    out[rows[mine]] = self.models_[key][1].probabilities(x[sel]).cpu().numpy()
        return out

    # -- persistence ------------------------------------------------------------------
    def _save_state(self, folder: Path) -> None:
        saved: dict[int, str] = {}
        layout = {}
        for key, (body, head) in self.models_.items():
            name = "all" if key == "*" else f"lang-{key}"
            if id(body) not in saved:
                body.save(str(folder / name / "body"), safe_serialization=True,
                          create_model_card=False)
                saved[id(body)] = f"{name}/body"
            head.save(folder / name / "head")
            layout[key] = {"body": saved[id(body)], "head": f"{name}/head"}

        write_json_atomic(folder / "models.json", {"prompt": self.prompt_, "models": layout})

    def _load_state(self, folder: Path) -> None:
        from sentence_transformers import SentenceTransformer


        quiet_libraries()
        self.device_ = default_device()
        meta = read_json(folder / "models.json")
        self.prompt_ = meta["prompt"]
        bodies: dict[str, Any] = {}
        self.models_ = {}
        for key, where in meta["models"].items():
            if where["body"] not in bodies:
                body = SentenceTransformer(str(folder / where["body"]), device=self.device_,
                                           local_files_only=True)
                body.max_seq_length = self.config.max_seq_length
                bodies[where["body"]] = body.eval()
            head = ClassifierHead.load(folder / where["head"], self.device_)
            if head.config["n_classes"] != len(self.label_set):
                raise ModelFormatError(f"{folder}: head {where['head']} has "
                                       f"{head.config['n_classes']} outputs for "
                                       f"{len(self.label_set)} labels")
            self.models_[key] = (bodies[where["body"]], head.eval())
