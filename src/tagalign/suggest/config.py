"""`HybridConfig`: the hybrid recipe's settings, one typed config composed of its parts'.

Each part keeps its config beside its code (`OmikujiConfig`, `TfidfNeighboursConfig`, …,
`RankerConfig`, `QualityConfig`, `StaticEncoderConfig`; `tagalign.params.PartConfig`), with
each default written once, on its field. The hybrid adds what it stacks and serves with
(``holdout_fraction``, ``candidates_per_source``, ``batch_size`` …). Its parts are built
from it only: a source from `HybridConfig.source_config`, the ranker from ``ranker`` …

A hybrid's parameters are saved flat (``recipe.json``'s ``params``, ``--param k=v``, a
projects file) under names older than this config: `FLAT_NAMES` says which fields each
sets, and `HybridConfig.from_params` / `HybridConfig.to_params` are the one place those
names are read and written. The recipe's published defaults, their ranges and the
``--param`` names are derived from the fields (`flat_defaults`, `HybridConfig.flat_ranges`)::

    HybridConfig.from_params({"ranker_rounds": 200}).ranker.num_rounds   # 200
    HybridConfig().to_params()["ranker_rounds"]                          # 500
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from tagalign.encode.static import StaticEncoderConfig
from tagalign.params import NonNegative, OpenFraction, ParamSpec, PartConfig, Positive
from tagalign.suggest.fusion import RankerConfig
from tagalign.suggest.quality import QualityConfig
from tagalign.suggest.sources.base import SOURCES, Source, SourceConfig
from tagalign.suggest.sources.domain_config import DomainSourceConfig
from tagalign.suggest.sources.labels import LabelRetrievalConfig
from tagalign.suggest.sources.lexical import LabelMatcherConfig
from tagalign.suggest.sources.neighbours import EmbeddingNeighboursConfig, TfidfNeighboursConfig
from tagalign.suggest.sources.omikuji import OmikujiConfig

#: the sources that read the records' embeddings (the encoder is trained for them)
EMBEDDING_SOURCES = frozenset({"emb_knn", "labels"})

#: each saved (flat) parameter name → the fields it sets, ``part.field`` or an own field,
#: in the order the recipe's defaults (and so every saved manifest) list them. A name that
#: sets several fields (``seed``, ``knn_k`` …) sets them alike (`HybridConfig` refuses
#: them otherwise); the first gives its default and range.
FLAT_NAMES: dict[str, tuple[str, ...]] = {
    "sources": ("sources",),
    "holdout_fraction": ("holdout_fraction",),
    "max_ranker_records": ("max_ranker_records",),
    "seed": ("seed", "estimator.seed", "encoder.seed", "omikuji.seed", "lexical.seed",
             "domain_source.seed"),
    "knn_k": ("tfidf_knn.k", "emb_knn.k"),
    "knn_power": ("tfidf_knn.power", "emb_knn.power"),
    "knn_search": ("tfidf_knn.search",),
    "knn_prune_df": ("tfidf_knn.prune_df",),
    "knn_postings": ("tfidf_knn.postings",),
    "knn_rescore": ("tfidf_knn.rescore",),
    "knn_subject_records": ("emb_knn.subject_records",),
    "tfidf_subject_records": ("tfidf_knn.subject_records",),
    "ann_index": ("emb_knn.index", "labels.index"),
    "labels_nprobe": ("labels.nprobe",),
    "labels_title_top_k": ("labels.title_top_k",),
    "labels_title_nprobe": ("labels.title_nprobe",),
    "labels_anchors": ("labels.anchors",),
    "candidates_per_source": ("candidates_per_source",),
    "omikuji_cluster_k": ("omikuji.cluster_k",),
    "omikuji_max_depth": ("omikuji.max_depth",),
    "omikuji_n_trees": ("omikuji.n_trees",),
    "omikuji_beam_size": ("omikuji.beam_size",),
    "omikuji_max_records": ("omikuji.max_records",),
    "refit_full": ("refit_full",),
    "embed_dim": ("encoder.dim",),
    "embed_vocab_size": ("encoder.vocab_size",),
    "embed_epochs": ("encoder.epochs",),
    "embed_batch_size": ("encoder.batch_size",),
    "embed_lr": ("encoder.lr",),
    "embed_label_pairs": ("encoder.label_pairs",),
    "embed_hard_negatives": ("encoder.hard_negatives",),
    "embed_max_records": ("encoder.max_records",),
    "embed_label_dropout": ("encoder.label_dropout",),
    "ranker_rounds": ("ranker.num_rounds",),
    "ranker_tail_simulation": ("ranker.tail_simulation",),
    "ranker_tail_max_count": ("ranker.tail_max_count",),
    "agreement": ("agreement",),
    "agreement_top_m": ("agreement_top_m",),
    "lexical_cross_language": ("lexical.cross_language",),
    "lexical_count_max_records": ("lexical.count_max_records",),
    "lexical_prefer_exact": ("lexical.prefer_exact",),
    "lexical_scattered": ("lexical.scattered",),
    "lexical_scattered_slack": ("lexical.scattered_slack",),
    "lexical_compounds": ("lexical.compounds",),
    "quality": ("quality",),
    "quality_folds": ("estimator.folds",),
    "held_out_evidence": ("held_out_evidence",),
    "held_out_depth": ("held_out_depth",),
    "candidates_omikuji": ("candidates_omikuji",),
    "candidates_tfidf_knn": ("candidates_tfidf_knn",),
    "candidates_emb_knn": ("candidates_emb_knn",),
    "candidates_labels": ("candidates_labels",),
    "prior_weight": ("prior_weight",),
    "support_weight": ("support_weight",),
    "unseen_weight": ("unseen_weight",),
    "domains": ("domains",),
    "domain_labels": ("domain_source.labels",),
    "domain_limit_train": ("domain_source.limit_train",),
    "batch_size": ("batch_size",),
}

#: source name → the `HybridConfig` field holding its config
SOURCE_PARTS = {"omikuji": "omikuji", "tfidf_knn": "tfidf_knn", "emb_knn": "emb_knn",
                "labels": "labels", "lexical": "lexical", "domains": "domain_source"}


@dataclass(frozen=True)
class HybridConfig(PartConfig):
    """The hybrid's settings (the module): its own fields, then its parts' configs."""

    # -- what is stacked, and how (`tagalign.train.stacking`) --------------------------
    sources: tuple[str, ...] = ("omikuji", "tfidf_knn", "emb_knn", "labels", "lexical")
    #: the `domains` source too (predicted record domains vs each subject's profile)
    domains: bool = False
    #: the share of train held out for the ranker (split B), by a seeded hash of the id
    holdout_fraction: OpenFraction = 0.15
    max_ranker_records: Positive = 12_000
    #: every seeded choice, the parts' included (`FLAT_NAMES`)
    seed: NonNegative = 13
    #: Omikuji's trees refit on all training records (split A and B) once the ranker is
    #: trained; "auto": unless split A alone fills ``omikuji.max_records`` (a refit would
    #: learn from another sample of the same size: 955 s of a 1M training for nothing;
    #: the split-A trees, which the ranker learned on, serve). Every 90k training refits.
    refit_full: bool | Literal["auto"] = "auto"
    #: agreement features: co-assignment with the record's ``agreement_top_m`` strongest
    #: candidates (`tagalign.suggest.agreement`; issue 18)
    agreement: bool = True
    agreement_top_m: Positive = 10
    #: the per-record quality estimate (``estimator``), cross-fitted on split B
    quality: bool = True
    #: split B's out-of-fold lists and neighbour records, kept for domain models
    #: (`tagalign.suggest.held_out`; issue 34), ``held_out_depth`` deep
    held_out_evidence: bool = True
    held_out_depth: int = 30
    # -- suggest-time knobs (`tagalign hyperopt`, no retraining) ----------------------
    #: each source's candidate count (its ``top_k``): its own below, else this
    candidates_per_source: Positive = 30
    candidates_omikuji: int | None = None
    candidates_tfidf_knn: int | None = None
    candidates_emb_knn: int | None = None
    candidates_labels: int | None = None
    #: the score corrections of `tagalign.suggest.fusion.blend`
    prior_weight: float = 0.0
    support_weight: float = 0.0
    #: the lift of a subject no training record carries (issue 66: the ranker scores them
    #: too low on dev). Tuned on dev by a protocol (`benchmarks/quality/unseen_weight.py`:
    #: 8,000 seeded dev records, the weight chosen on one half, its figures read on the
    #: other): 0.75 lifted the other half's unseen recall@20 0.321 → 0.363 and @5 0.203 →
    #: 0.239 for avg R@5..20 0.6974 → 0.6973 and F1@5 0.3952 → 0.3949 (full-train model)
    unseen_weight: float = 0.75
    #: records suggested (and learned) per batch
    batch_size: Positive = 1024
    # -- the parts ----------------------------------------------------------------------
    omikuji: OmikujiConfig = field(default_factory=OmikujiConfig)
    tfidf_knn: TfidfNeighboursConfig = field(default_factory=TfidfNeighboursConfig)
    emb_knn: EmbeddingNeighboursConfig = field(default_factory=EmbeddingNeighboursConfig)
    labels: LabelRetrievalConfig = field(default_factory=LabelRetrievalConfig)
    lexical: LabelMatcherConfig = field(default_factory=LabelMatcherConfig)
    domain_source: DomainSourceConfig = field(default_factory=DomainSourceConfig)
    ranker: RankerConfig = field(default_factory=RankerConfig)
    estimator: QualityConfig = field(default_factory=QualityConfig)
    encoder: StaticEncoderConfig = field(default_factory=StaticEncoderConfig)

    kind: ClassVar[str] = "hybrid"

    # -- the saved names: the one place they are read and written ------------------------
    @classmethod
    def flat_names(cls) -> dict[str, tuple[str, ...]]:
        return FLAT_NAMES

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> HybridConfig:
        """The config of a hybrid's flat ``params`` (names of `FLAT_NAMES`; missing ones
        take their default), each checked under its flat name (`ParamError`)."""
        given = {**flat_defaults(), **params}
        _flat_spec().check(given)
        return super().from_params({**given, "sources": tuple(given["sources"])})

    def to_params(self) -> dict[str, Any]:
        """The flat parameters, as saved (`FLAT_NAMES` order; ``sources`` a list)."""
        out = super().to_params()
        out["sources"] = list(out["sources"])
        return out

    @property
    def blend_weights(self) -> tuple[float, float, float]:
        """`tagalign.suggest.fusion.blend`'s weights: (prior, support, unseen)."""
        return self.prior_weight, self.support_weight, self.unseen_weight

    # -- what the parts are built from ----------------------------------------------------
    @property
    def source_names(self) -> list[str]:
        """``sources``, plus ``domains`` when ``domains`` is on."""
        names = list(self.sources)
        return names + ["domains"] if self.domains and "domains" not in names else names

    @property
    def uses_embeddings(self) -> bool:
        return bool(EMBEDDING_SOURCES & set(self.sources))

    def candidate_count(self, name: str) -> int:
        """Source ``name``'s candidate count: its own tuned one, else
        ``candidates_per_source``."""
        own: int | None = getattr(self, f"candidates_{name}", None)
        return own or self.candidates_per_source

    def source_config(self, name: str, config_class: type[SourceConfig] = SourceConfig
                      ) -> SourceConfig:
        """Source ``name``'s config, its ``top_k`` its candidate count (a source this
        config has no part for, registered by another package: ``config_class``'s
        defaults)."""
        part = getattr(self, SOURCE_PARTS[name]) if name in SOURCE_PARTS else config_class()
        if "top_k" in part.field_names():
            part = replace(part, top_k=self.candidate_count(name))
        return part

    def new_source(self, name: str) -> Source:
        """Source ``name`` (untrained), built from its config."""
        cls = SOURCES.lookup(name)
        return cls(self.source_config(name, cls.config_class))


@functools.cache
def flat_defaults() -> dict[str, Any]:
    """The hybrid's published defaults: `HybridConfig`'s fields under their flat names."""
    return HybridConfig().to_params()


@functools.cache
def _flat_spec() -> ParamSpec:
    return ParamSpec("hybrid config", flat_defaults(), **HybridConfig.flat_ranges())
