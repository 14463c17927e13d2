"""`ordinal-wic` (R4) — XL-DURel: a shared-weight bi-encoder scoring two usages of a word.

Each usage is its context with the target wrapped in ``<t>`` … ``</t>`` (special tokens
added to the tokenizer, embeddings resized), cut symmetrically around the target to
``max_seq_length`` tokens so the target always survives. Both usages go through the same
sentence-transformers model (mean pooling as published, or the mean of the target's
sub-tokens); their cosine is the score, and per-language cut points on it give the
ordinal label 1..4 (`tagalign.pairs.thresholds`). Training uses a loss of
`tagalign.pairs.losses` and keeps the epoch with the best dev Spearman.

Published defaults (lr 1e-5, batch 32, 10 epochs, 128 tokens) are GPU-sized; budget knobs
for a CPU: ``train_layers``, ``max_seq_length``, ``epochs``, ``limit_pairs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from tagalign.encode.transformer import base_model_path, default_device
from tagalign.errors import InputError, ModelFormatError, NotFoundError
from tagalign.io import atomic_dir, json_object, register_kind
from tagalign.pairs.data import Pair, Use
from tagalign.pairs.ensemble import Ensemble
from tagalign.pairs.metrics import evaluate, spearman
from tagalign.pairs.params import (  # noqa: F401 - re-exported
    DEFAULTS,
    POOLINGS,
    RECIPE,
    PairsConfig,
    PairScorerBase,
    check_params,
)
from tagalign.pairs.pooling import TargetPooling
from tagalign.pairs.thresholds import Thresholds
from tagalign.runtime import ProgressCallback, quiet_libraries
from tagalign.sampling import sample_indices

#: told once, after the first training steps are timed: (steps in all, batch size, pairs/s,
#: seconds of training left, steps timed)
EstimateCallback = Callable[[int, int, float, float, int], None]

MARKERS = ("<t>", "</t>")


def _is_pairs_model(folder: Path) -> bool:
    config = json_object(folder / "config.json")
    return config is not None and ("markers" in config or (folder / "thresholds.json").is_file())


register_kind("pairs", "a pairs model, read by `tagalign pairs predict`", _is_pairs_model)


def mark(use: Use) -> str:
    """The context with its target wrapped in the markers."""
    c = use.context
    return f"{c[:use.start]}{MARKERS[0]}{c[use.start:use.end]}{MARKERS[1]}{c[use.end:]}"


class UseFormatter:
    """A usage → model input text of at most ``max_seq_length`` tokens (with ``prefix`` and
    the tokenizer's own special tokens), cut symmetrically around the marked target."""

    def __init__(self, tokenizer: Any, max_seq_length: int, prefix: str = ""):
        self.tokenizer = tokenizer
        self.prefix = prefix
        specials = len(tokenizer("", add_special_tokens=True)["input_ids"])
        own = len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) if prefix else 0
        self.budget = max(4, max_seq_length - specials - own)

    def _count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def __call__(self, use: Use) -> str:
        text = mark(use)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if len(offsets) <= self.budget:
            return self.prefix + text
        open_at, close_at = use.start, use.end + len(MARKERS[0])  # markers' character starts
        first = next(i for i, (a, b) in enumerate(offsets) if b > open_at)
        last = max(i for i, (a, b) in enumerate(offsets) if a <= close_at)
        left, right = self._window(first, last, len(offsets))
        while True:
            cut = text[offsets[left][0]:offsets[right][1]]
            # re-tokenising a cut string may split its edges differently: shrink until it fits
            if self._count(cut) <= self.budget or (left == first and right == last):
                return self.prefix + cut
            if first - left >= right - last and left < first:
                left += 1
            else:
                right -= 1

    def _window(self, first: int, last: int, n: int) -> tuple[int, int]:
        spare = max(0, self.budget - (last - first + 1))
        before = min(first, spare // 2)
        after = min(n - 1 - last, spare - before)
        before = min(first, spare - after)
        return first - before, last + after


class PairScorer(PairScorerBase):
    """The trained (or untuned) bi-encoder with its cut points; ``params`` as `DEFAULTS`
    (their ranges and check: `PairScorerBase`)."""

    def __init__(self, model: Any, params: dict[str, Any], prompts: dict[str, str] | None = None,
                 thresholds: Thresholds | None = None):
        self.model = model
        self.params = self.with_defaults(params)
        self.prompts = prompts or {}
        self.thresholds = thresholds
        self.history: list[dict[str, Any]] = []
        #: figures kept beside the model: ``dev`` and ``lemma_cv`` (`tagalign pairs train`)
        self.validation: dict[str, Any] = {}
        #: the `tagalign.pairs.presets` preset it was trained with (None: none, or before)
        self.preset: str | None = None
        self._formatter: UseFormatter | None = None
        self._params_set()

    def _params_set(self) -> None:
        super()._params_set()
        #: untuned encoders whose cosines join the tuned model's (`tagalign.pairs.ensemble`)
        self.ensemble: Ensemble | None = (
            Ensemble(self.config.ensemble, self.config.ensemble_weights)
            if self.config.ensemble else None)

    def _twin(self, params: dict[str, Any]) -> Self:
        """The base model built again with ``params`` (`build`): untrained, untuned."""
        return type(self).build(params)

    # -- building -----------------------------------------------------------------------
    @classmethod
    def build(cls, params: dict[str, Any] | None = None, device: str | None = None
              ) -> Self:
        """The base model with markers added (embeddings resized) and the chosen pooling."""
        import torch
        from sentence_transformers import SentenceTransformer


        p = cls.with_defaults(params or {})
        cls.check_params(p)
        cfg = PairsConfig(**p)
        quiet_libraries()
        torch.manual_seed(cfg.seed)
        base, prompts = base_model_path(cfg.base_model)
        try:
            model = SentenceTransformer(base, device=device or default_device(),
                                        local_files_only=Path(base).is_dir())
        except OSError as exc:  # a base model that cannot be fetched or read
            raise NotFoundError(str(exc)) from exc
        model.max_seq_length = cfg.max_seq_length
        tok = model.tokenizer
        tok.add_tokens(list(MARKERS), special_tokens=True)
        model[0].auto_model.resize_token_embeddings(len(tok))
        if cfg.pooling == "target":
            ids = tok.convert_tokens_to_ids(list(MARKERS))
            dim = model.get_embedding_dimension()
            model = SentenceTransformer(
                modules=[model[0], TargetPooling(dim, ids[0], ids[1]),
                         *list(model)[2:]], device=device or default_device())
            model.max_seq_length = cfg.max_seq_length
        return cls(model, p, prompts)

    @property
    def formatter(self) -> UseFormatter:
        if self._formatter is None:
            # e5 marks symmetric tasks with "query: " on both sides
            self._formatter = UseFormatter(self.model.tokenizer, self.config.max_seq_length,
                                           self.prompts.get("query", ""))
        return self._formatter

    # -- scoring ------------------------------------------------------------------------
    def encode_uses(self, uses: Sequence[Use], progress: ProgressCallback | None = None
                    ) -> dict[Use, np.ndarray]:
        """Each distinct usage encoded once (L2-normalised rows)."""
        distinct = list(dict.fromkeys(uses))
        texts = [self.formatter(u) for u in distinct]
        step = max(1, self.config.encode_batch_size) * 8
        rows: list[np.ndarray] = []
        for i in range(0, len(texts), step):
            rows.append(self.model.encode(texts[i:i + step], convert_to_numpy=True,
                                          batch_size=self.config.encode_batch_size,
                                          show_progress_bar=False))
            if progress:
                progress("encoding usages", min(i + step, len(texts)), len(texts))
        emb = np.vstack(rows) if rows else np.zeros((0, 1), np.float32)
        emb = emb / np.linalg.norm(emb, axis=1, keepdims=True).clip(1e-12)
        return dict(zip(distinct, emb, strict=True))

    def cosine(self, pairs: Sequence[Pair], progress: ProgressCallback | None = None
               ) -> np.ndarray:
        """Cosine of the two usages of each pair under the tuned encoder."""
        emb = self.encode_uses([u for p in pairs for u in (p.use1, p.use2)], progress)
        return np.array([float(emb[p.use1] @ emb[p.use2]) for p in pairs], np.float64)

    def score(self, pairs: Sequence[Pair], progress: ProgressCallback | None = None) -> np.ndarray:
        """What the cut points cut: the tuned cosine, or with an ensemble its weighted mean
        with the members' (standardised as fitted by `fit_thresholds`)."""
        cosine = self.cosine(pairs, progress)
        if self.ensemble is None:
            return cosine
        if not self.ensemble.stats_:
            raise ValueError("the ensemble is not fitted: fit the cut points first")
        return self.ensemble.score(cosine, pairs)

    def fit_thresholds(self, pairs: Sequence[Pair], scores: np.ndarray | None = None
                       ) -> Thresholds:
        """Cut points on labelled ``pairs``; ``scores``: their tuned cosines when known.
        With an ensemble, the components' standardisation is fitted on the same pairs
        first."""
        labelled_pairs = [p for p in pairs if p.label is not None]
        if not labelled_pairs:
            raise InputError("cut points need labelled pairs (dev data with labels.tsv)")
        cosine = (self.cosine(labelled_pairs) if scores is None else np.asarray(
            [s for p, s in zip(pairs, scores, strict=True) if p.label is not None], float))
        if self.ensemble is not None:
            cosine = self.ensemble.score(cosine, labelled_pairs, fit=True)
        labelled = list(zip(labelled_pairs, cosine, strict=True))
        self.thresholds = self.new_thresholds().fit(
            [s for _, s in labelled], [p.label for p in pairs if p.label is not None],
            [p.language for p, _ in labelled], [p.lemma for p, _ in labelled])
        return self.thresholds

    def new_thresholds(self) -> Thresholds:
        """Unfitted cut points of this scorer's ``cut_mode``."""
        return Thresholds(mode=self.config.cut_mode, shrink=float(self.config.cut_shrink))

    def predict(self, pairs: Sequence[Pair], progress: ProgressCallback | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """(labels 1..4, cosines)."""
        if self.thresholds is None:
            raise InputError("no cut points: fit them on labelled dev pairs first")
        scores = self.score(pairs, progress)
        return self.thresholds.predict(scores, [p.language for p in pairs]), scores

    # -- persistence --------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """One folder: ``model/`` (sentence-transformers, safetensors), ``thresholds.json``,
        the manifest ``config.json`` (`ModelFamily.write_manifest`: format, recipe,
        parameters, then prompts, markers, training history, validation, versions)."""
        if self.thresholds is None:
            raise ValueError("fit the cut points before saving")
        with atomic_dir(Path(path)) as tmp:
            self.model.save(str(tmp / "model"), safe_serialization=True,
                            create_model_card=False)
            self.thresholds.save(tmp / "thresholds.json")
            if self.ensemble is not None:
                self.ensemble.save(tmp)
            self.write_manifest(tmp, self.params, prompts=self.prompts,
                                markers=list(MARKERS), history=self.history,
                                validation=self.validation, preset=self.preset)

    @classmethod
    def load(cls, path: Path, device: str | None = None) -> PairScorer:
        path = Path(path)
        cls.check_folder(path, "pairs", f"{path}: not a pairs model folder (no config.json)")
        config = cls.read_manifest(path)  # saved without ``format`` before: format 1
        if config.get("recipe") != RECIPE:
            raise ModelFormatError(f"{path}: recipe {config.get('recipe')!r} is not {RECIPE!r}")
        quiet_libraries()
        try:
            model = load_st_model(path / "model", device or default_device())
        except OSError as exc:  # a model folder cut short
            raise NotFoundError(str(exc)) from exc
        vocab = model.tokenizer.get_vocab()
        if config.get("markers") != list(MARKERS) or any(m not in vocab for m in MARKERS):
            raise ModelFormatError(f"{path}: the tokenizer lacks the target markers {MARKERS}")
        scorer = cls(model, config["params"], config.get("prompts"),
                     Thresholds.load(path / "thresholds.json"))
        scorer.history = config.get("history", [])
        scorer.validation = config.get("validation", {})  # absent before issue 35
        scorer.preset = config.get("preset")  # absent before issue 49
        if scorer.ensemble is not None:
            scorer.ensemble = Ensemble.load(path)
        return scorer


def load_st_model(folder: Path, device: str) -> Any:
    """A saved sentence-transformers folder; one holding `TargetPooling` is assembled here
    from its modules (sentence-transformers would import a class outside its own package
    only with ``trust_remote_code``), taking library classes from sentence_transformers
    only."""
    import importlib
    import json

    from sentence_transformers import SentenceTransformer

    entries = json.loads((folder / "modules.json").read_text("utf-8"))
    ours = f"{TargetPooling.__module__}.{TargetPooling.__name__}"
    if all(e["type"] != ours for e in entries):
        return SentenceTransformer(str(folder), device=device, local_files_only=True)
    modules = []
    for e in entries:
        if e["type"] == ours:
            cls: Any = TargetPooling
        elif e["type"].startswith("sentence_transformers."):
            module, _, name = e["type"].rpartition(".")
            cls = getattr(importlib.import_module(module), name)
        else:
            raise ModelFormatError(f"{folder}: module type {e['type']!r} is not one we load")
        modules.append(cls.load(str(folder), subfolder=e["path"], local_files_only=True))
    return SentenceTransformer(modules=modules, device=device)


def dev_metrics(scorer: PairScorer, dev: Sequence[Pair], progress: ProgressCallback | None = None
                ) -> dict[str, Any]:
    """Spearman of the cosine on labelled dev pairs, and alpha with cut points fitted on
    the same pairs (an optimistic figure, for watching training, not for reporting)."""
    labelled = [p for p in dev if p.label is not None]
    scores = scorer.cosine(labelled, progress)  # the tuned encoder's: what training changes
    gold = [p.label for p in dev if p.label is not None]
    langs = [p.language for p in labelled]
    cuts = scorer.new_thresholds().fit(scores, gold, langs, [p.lemma for p in labelled])
    result = evaluate(gold, cuts.predict(scores, langs), langs, scores)
    return {"spearman": spearman(gold, scores), "mean_alpha": result["mean_alpha"],
            "alpha": {k: v["alpha"] for k, v in result["languages"].items()},
            "scores": scores}


def sample_pairs(pairs: Sequence[Pair], limit: int | None, seed: int) -> list[Pair]:
    """At most ``limit`` pairs drawn with a fixed seed (the files are sorted by lemma)."""
    return [pairs[i] for i in sample_indices(len(pairs), limit, seed)]


def split_dev(pairs: Sequence[Pair], fraction: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Labelled ``pairs`` split per language by a seeded permutation (numpy
    ``default_rng(seed + 1)``): the first ``fraction`` of each language picks the epoch and
    fits the cut points, the rest is held out for an honest alpha (the benchmark's dev
    halves at ``fraction=0.5``)."""
    if not 0 < fraction < 1:
        raise InputError(f"fit split must lie strictly between 0 and 1, got {fraction}")
    labelled = [p for p in pairs if p.label is not None]
    rng = np.random.default_rng(seed + 1)
    fit, held = [], []
    for lang in sorted({p.language for p in labelled}):
        mine = [p for p in labelled if p.language == lang]
        order = rng.permutation(len(mine))
        cut = int(len(mine) * fraction)
        fit += [mine[i] for i in order[:cut]]
        held += [mine[i] for i in order[cut:]]
    return fit, held


def held_out_metrics(scorer: PairScorer, pairs: Sequence[Pair],
                     progress: ProgressCallback | None = None) -> dict[str, Any]:
    """Alpha per language and mean, Spearman of the cosine, on labelled pairs the cut points
    were not fitted on."""
    labelled = [p for p in pairs if p.label is not None]
    labels, scores = scorer.predict(labelled, progress)
    result = evaluate([p.label for p in pairs if p.label is not None], labels,
                      [p.language for p in labelled], scores)
    return {"pairs": len(labelled), "mean_alpha": result["mean_alpha"],
            "spearman": result["spearman"],
            "alpha": {k: v["alpha"] for k, v in result["languages"].items()}}


def train(scorer: PairScorer, train_pairs: Sequence[Pair], dev_pairs: Sequence[Pair],
          workdir: Path, progress: ProgressCallback | None = None,
          on_epoch: Callable[[dict[str, Any]], None] | None = None,
          on_estimate: EstimateCallback | None = None) -> PairScorer:
    """Fine-tune ``scorer`` in place, keep the epoch of best dev Spearman, fit cut points on
    dev. ``epochs=0`` gives the untuned encoder with fitted cut points (the floor).
    ``on_estimate``: told once the expected training time (`tagalign.pairs.training`)."""
    from tagalign.pairs.training import fit_model

    p = scorer.config
    labelled = [x for x in train_pairs if x.label is not None]
    dev = [x for x in dev_pairs if x.label is not None]
    if not dev:
        raise InputError("dev pairs need labels (cut points and checkpoint choice use them)")
    dev_scores = None
    if p.epochs > 0:
        if not labelled:
            raise InputError("no labelled training pairs")
        dev_scores = fit_model(scorer, sample_pairs(labelled, p.limit_pairs, p.seed),
                               dev, workdir, progress, on_epoch, on_estimate)
    scorer.fit_thresholds(dev, dev_scores)
    return scorer
