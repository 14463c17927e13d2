"""One progress display while a transformers / sentence-transformers trainer runs.

The trainer brings its own console output: a tqdm bar (``ProgressCallback``), loss dicts
printed at each logging step (``ProgressCallback.on_log`` / ``PrinterCallback``) and, in
sentence-transformers, the model-card pass (another tqdm bar). Inside a tagalign command
that shows its own phases and bars, that makes two displays fighting over the terminal.
`quiet_trainer` removes those callbacks (for a caller that reports progress itself);
`train_with_progress` also logs the training's progress (every 10 s; the latest loss at
DEBUG level), the callback removed even when training fails.
"""

from __future__ import annotations

import logging
from typing import Any

from tagalign.encode.base import log_progress

log = logging.getLogger(__name__)


def quiet_trainer_class() -> type:
    """`SentenceTransformerTrainer` without the model-card callback: that callback's
    ``on_init_end`` runs a tqdm pass ("Computing widget examples") while the trainer is
    built, before `quiet_trainer` could remove it (sentence-transformers documents
    overriding `add_model_card_callback` for this)."""
    from sentence_transformers import SentenceTransformerTrainer

    class QuietTrainer(SentenceTransformerTrainer):
        def add_model_card_callback(self, default_args_dict: dict[str, Any]) -> None:
            pass

    return QuietTrainer


def quiet_trainer(trainer: Any) -> None:
    """Remove the trainer's own console output (tqdm bars, printed loss dicts)."""
    from sentence_transformers.base.model_card import BaseModelCardCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    # the model-card pass (sentence-transformers) runs a tqdm bar of its own
    quiet = (PrinterCallback, ProgressCallback, BaseModelCardCallback)
    for callback in list(trainer.callback_handler.callbacks):
        if isinstance(callback, quiet):
            trainer.remove_callback(callback)


def train_with_progress(trainer: Any, description: str) -> Any:
    """`quiet_trainer`, then ``trainer.train()``, its progress logged (`log_progress`)."""
    from transformers import TrainerCallback

    quiet_trainer(trainer)
    report: list = []

    class LogProgress(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            report.append(log_progress(log, description, state.max_steps or 0))

        def on_step_end(self, args, state, control, **kw):
            if report:
                report[-1](state.global_step)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                log.debug(f"{description}: loss {float(logs['loss']):.3f}")

    callback = LogProgress()
    trainer.add_callback(callback)
    try:
        return trainer.train()
    finally:
        trainer.remove_callback(callback)
