"""Untuned encoders beside the fine-tuned pair model (issue 49): each member embeds the two
plain contexts (no target markers) with a `tagalign.encode` encoder, and the pair's score is
a weighted mean of the standardised cosines:

    score = w[lang] * z(tuned cosine) + (1 - w[lang]) * mean over members of z(member cosine)

``z`` standardises each encoder's cosines by their mean and spread on the fit data (the
dev pairs the cut points are fitted on; no labels used): encoders' cosines live on
different scales. ``w`` is the tuned model's weight per language, ``"*"`` for any other
language (default: the plain mean, 1 / (1 + members)). The cut points then work on the
score as they would on a cosine (`tagalign.pairs.thresholds`).

In the lemma-grouped cross-validation (docs/pairs.md) the untuned multilingual USE helps
where fine-tuning on a few thousand pairs does not carry over, English above all.

Saved as ``ensemble.json`` in the pairs model folder: the members' encoder names and
fingerprints (the weights come with the installed encoder package; a different one is
refused at load), the weights and the standardisation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.errors import InputError, ModelFormatError
from tagalign.io import read_json, write_json_atomic
from tagalign.pairs.data import Pair

DEFAULT_KEY = "*"
FILE = "ensemble.json"


def check_members(encoders: Any, weights: Any) -> None:
    """The ``ensemble`` and ``ensemble_weights`` parameters: encoder names the registry
    knows, weights in [0, 1] by language (``"*"``: any other)."""
    from tagalign.encode.base import ENCODERS

    if not isinstance(encoders, list) or not all(isinstance(e, str) for e in encoders):
        raise InputError(f"ensemble must be a list of encoder names, got {encoders!r}")
    for spec in encoders:
        ENCODERS.lookup(spec.partition(":")[0], shown=spec)
    if not isinstance(weights, Mapping):
        raise InputError(f"ensemble_weights must map languages to weights, got {weights!r}")
    for lang, w in weights.items():
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0 <= w <= 1:
            raise InputError(f"ensemble_weights[{lang!r}] must be a number in [0, 1], got {w!r}")


class Ensemble:
    """Members (encoder specs) with the tuned model's ``weights`` per language; `fit` learns
    the standardisation of every component (the tuned model first)."""

    def __init__(self, encoders: Sequence[str], weights: Mapping[str, float] | None = None):
        check_members(list(encoders), dict(weights or {}))
        self.encoders = list(encoders)
        self.weights = {DEFAULT_KEY: 1.0 / (1 + len(self.encoders)), **(weights or {})}
        #: (mean, std) per component on the fit data: the tuned model, then each member
        self.stats_: list[list[float]] = []
        self._loaded: dict[str, Any] = {}

    def _encoder(self, spec: str) -> Any:
        if spec not in self._loaded:
            from tagalign.encode.base import get_encoder

            self._loaded[spec] = get_encoder(spec)
        return self._loaded[spec]

    def member_cosines(self, pairs: Sequence[Pair]) -> list[np.ndarray]:
        """Per member, the cosine of each pair's two contexts (each distinct context
        encoded once)."""
        contexts = list(dict.fromkeys(u.context for p in pairs for u in (p.use1, p.use2)))
        row = {c: i for i, c in enumerate(contexts)}
        out = []
        for spec in self.encoders:
            emb = self._encoder(spec).encode(contexts, kind="passage")
            out.append(np.array([float(emb[row[p.use1.context]] @ emb[row[p.use2.context]])
                                 for p in pairs], np.float64))
        return out

    def fit(self, components: Sequence[np.ndarray]) -> Ensemble:
        """Standardisation of each component (tuned cosine first) on the fit pairs."""
        if len(components) != 1 + len(self.encoders):
            raise ValueError("one component per member and the tuned model")
        self.stats_ = [[float(np.mean(c)), float(np.std(c)) or 1.0] for c in components]
        return self

    def combine(self, components: Sequence[np.ndarray], languages: Sequence[str]
                ) -> np.ndarray:
        """The weighted mean of the standardised components, per pair."""
        if not self.stats_:
            raise ValueError("the ensemble is not fitted")
        z = [(np.asarray(c, float) - m) / s for c, (m, s) in zip(components, self.stats_,
                                                                   strict=True)]
        w = np.array([self.weights.get(lang, self.weights[DEFAULT_KEY]) for lang in languages])
        members = np.mean(z[1:], axis=0) if len(z) > 1 else np.zeros(len(w))
        return w * z[0] + (1 - w) * members

    def score(self, cosine: np.ndarray, pairs: Sequence[Pair], fit: bool = False
              ) -> np.ndarray:
        """The combined score of ``pairs`` whose tuned cosines are ``cosine``; ``fit``:
        standardise the components on these pairs first."""
        parts = [np.asarray(cosine, float), *self.member_cosines(pairs)]
        if fit:
            self.fit(parts)
        return self.combine(parts, [p.language for p in pairs])

    def save(self, folder: Path) -> None:
        write_json_atomic(Path(folder) / FILE, {
            "members": [{"encoder": e, "fingerprint": self._encoder(e).fingerprint}
                        for e in self.encoders],
            "weights": self.weights, "stats": self.stats_})

    @classmethod
    def load(cls, folder: Path) -> Ensemble:
        """The saved ensemble; refused when a member's installed weights differ from those
        it was fitted with."""
        path = Path(folder) / FILE
        if not path.is_file():
            raise ModelFormatError(f"{folder}: the model names ensemble members but has no {FILE}")
        data = read_json(path)
        members = data.get("members", [])
        out = cls([m["encoder"] for m in members], data.get("weights"))
        out.stats_ = [[float(a), float(b)] for a, b in data.get("stats", [])]
        if len(out.stats_) != 1 + len(members):
            raise ModelFormatError(f"{path}: {len(out.stats_)} standardisations for "
                                   f"{1 + len(members)} components")
        for m in members:
            have = out._encoder(m["encoder"]).fingerprint
            if have != m["fingerprint"]:
                raise ModelFormatError(
                    f"{path}: member {m['encoder']} was fitted with weights {m['fingerprint']}"
                    f", the installed ones are {have}; retrain the pairs model "
                    "(tagalign pairs train) or install the encoder it was trained with")
        return out
