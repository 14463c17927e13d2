"""Fine-tuning loop of `tagalign.pairs.model`: the sentence-transformers trainer with a
loss of `tagalign.pairs.losses`, dev Spearman/alpha after each epoch, best epoch kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tagalign.encode.transformer import freeze_lower_layers
from tagalign.errors import InputError
from tagalign.pairs.data import Pair
from tagalign.pairs.losses import get_loss
from tagalign.runtime import ProgressCallback
from tagalign.train.progress import quiet_trainer, quiet_trainer_class

if TYPE_CHECKING:
    from tagalign.pairs.model import EstimateCallback, PairScorer

#: steps timed before the expected training time is told (the first step, which warms up
#: the model, is left out of the rate)
ESTIMATE_STEPS = 6


def training_columns(scorer: PairScorer, pairs: Sequence[Pair]) -> dict[str, list]:
    """sentence1/sentence2 texts and the loss's target (``label`` for contrastive)."""
    loss = get_loss(scorer.config.loss)
    cols: dict[str, list] = {"sentence1": [], "sentence2": [], "label": []}
    for p in pairs:
        if p.label is None:  # fit_scorer passes labelled pairs only
            raise InputError(f"training pair {p.key} has no label")
        target = loss.target(float(p.label))
        if target is None:
            continue
        cols["sentence1"].append(scorer.formatter(p.use1))
        cols["sentence2"].append(scorer.formatter(p.use2))
        cols["label"].append(int(target) if loss.name == "contrastive" else float(target))
    return cols


def fit_model(scorer: PairScorer, train_pairs: Sequence[Pair], dev: Sequence[Pair],
              workdir: Path, progress: ProgressCallback | None = None,
              on_epoch: Callable[[dict[str, Any]], None] | None = None,
              on_estimate: EstimateCallback | None = None) -> Any:
    """Train in place, restore the epoch of best dev Spearman; returns that epoch's cosines
    on the labelled ``dev`` pairs (numpy, in order), so the cut points need no new pass.
    With no ``dev`` (a cross-validation fold, `tagalign.pairs.crossval`: its held-out
    lemmas must not pick its checkpoint) the last epoch is kept and None returned."""
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainingArguments
    from transformers import TrainerCallback

    from tagalign.pairs.model import dev_metrics

    p, model = scorer.config, scorer.model
    torch.manual_seed(p.seed)
    markers = None
    if p.train_layers is not None:
        freeze_lower_layers(model, int(p.train_layers))
        if p.train_markers:  # the markers learn even so (False: the old, faster way)
            markers = MarkerRows.attach(scorer)
    data = Dataset.from_dict(training_columns(scorer, train_pairs)).shuffle(seed=p.seed)
    if len(data) == 0:
        raise InputError("no training pairs left after mapping labels to the loss's targets")
    best: dict[str, Any] = {"spearman": float("-inf"), "state": None}
    clock: dict[int, float] = {}

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock[0] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if progress:
                progress("training", state.global_step, state.max_steps)
            step = state.global_step
            if on_estimate and step in (1, min(ESTIMATE_STEPS, state.max_steps)):
                clock[step] = time.perf_counter()
                if step == min(ESTIMATE_STEPS, state.max_steps):
                    first = 1 if step > 1 else 0  # the warm-up step, when there are others
                    per_step = (clock[step] - clock[first]) / (step - first)
                    on_estimate(state.max_steps, p.batch_size, p.batch_size / per_step,
                                per_step * (state.max_steps - step), step)

        def on_epoch_end(self, args, state, control, **kw):
            if not dev:
                return
            metrics = dev_metrics(scorer, dev, progress)
            scores = metrics.pop("scores")
            epoch = round(state.epoch or 0)
            losses = [h["loss"] for h in state.log_history if "loss" in h]
            entry = {"epoch": epoch, "train_loss": losses[-1] if losses else None, **metrics}
            scorer.history.append(entry)
            if metrics["spearman"] > best["spearman"]:
                best["spearman"] = metrics["spearman"]
                best["epoch"] = epoch
                best["scores"] = scores
                best["state"] = {k: v.detach().clone() for k, v in model.named_parameters()
                                 if v.requires_grad}
            if on_epoch:
                on_epoch(entry)

    args = SentenceTransformerTrainingArguments(
        output_dir=str(Path(workdir) / "pairs-checkpoints"), num_train_epochs=p.epochs,
        per_device_train_batch_size=p.batch_size, learning_rate=p.lr,
        warmup_steps=float(p.warmup), save_strategy="no", eval_strategy="no",
        report_to="none", logging_steps=max(1, len(data) // p.batch_size // 20),
        seed=p.seed, data_seed=p.seed, use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0, disable_tqdm=True)
    trainer = quiet_trainer_class()(model=model, args=args, train_dataset=data,
                                    loss=get_loss(p.loss).build(model), callbacks=[Watch()])
    quiet_trainer(trainer)  # progress goes through `progress`, the caller's display
    try:
        trainer.train()
        if best["state"] is not None:
            with torch.no_grad():
                params = dict(model.named_parameters())
                for name, value in best["state"].items():
                    params[name].copy_(value)
            scorer.history.append({"best_epoch": best["epoch"], "spearman": best["spearman"]})
    finally:
        if markers is not None:
            markers.fold()  # the best epoch's rows into the embedding matrix, hook removed
    return best.get("scores")


class MarkerRows:
    """The ``<t>``/``</t>`` rows trained while the embedding matrix stays frozen (the
    ``train_layers`` budget knob freezes it with the lower layers; without this the markers
    keep their resize-time random values).

    The two rows are a parameter of their own, registered on the embedding module (so the
    trainer optimises it and the best-epoch snapshot holds it); a forward hook puts them in
    place of the frozen rows wherever a marker id occurs. Not a gradient mask on the whole
    matrix: that would still make the trainer keep a dense gradient and two Adam moments
    for every row (250k × 384 for multilingual e5-small, ~1.1 GB) and update them all at
    every step, and any weight decay would shrink rows that are meant to stay as they are;
    here Adam state and decay touch 2 × d values. Backward now runs down to the
    embeddings (through the frozen layers too, without their weight gradients): the price
    of trained markers. `fold` writes the rows into the matrix and removes the hook, so
    the saved model is a plain sentence-transformers model."""

    NAME = "tagalign_marker_rows"

    def __init__(self, embedding, ids: tuple[int, int]):
        import torch

        self.embedding, self.ids = embedding, ids
        rows = embedding.weight.detach()[list(ids)].clone()
        embedding.register_parameter(self.NAME, torch.nn.Parameter(rows))
        self.handle = embedding.register_forward_hook(self._substitute)

    @classmethod
    def attach(cls, scorer: PairScorer) -> MarkerRows | None:
        """Marker rows on ``scorer``'s embedding layer when its matrix is frozen (a model
        whose embeddings still train needs none)."""
        from tagalign.pairs.model import MARKERS

        body = getattr(scorer.model[0], "auto_model", None)
        embedding = body.get_input_embeddings() if body is not None else None
        if embedding is None or embedding.weight.requires_grad:
            return None
        ids = scorer.model.tokenizer.convert_tokens_to_ids(list(MARKERS))
        return cls(embedding, (int(ids[0]), int(ids[1])))

    def _substitute(self, module, args, output):
        import torch

        ids = args[0]
        is_open, is_close = ids == self.ids[0], ids == self.ids[1]
        rows = getattr(module, self.NAME)[is_close.long()].to(output.dtype)
        return torch.where((is_open | is_close).unsqueeze(-1), rows, output)

    def fold(self) -> None:
        import torch

        self.handle.remove()
        rows = getattr(self.embedding, self.NAME)
        with torch.no_grad():
            self.embedding.weight[list(self.ids)] = rows.detach().to(self.embedding.weight.dtype)
        delattr(self.embedding, self.NAME)
