"""Bilingual contrastive static embeddings, trained from scratch on CPU (the hybrid's
encoder; it is used, saved and loaded as `tagalign.encode.static.StaticEmbeddingEncoder`).

A WordPiece tokenizer is trained on the records and subject labels; a sentence-transformers
`StaticEmbedding` (one vector per token, mean-pooled) learns with in-batch negatives
(`MultipleNegativesRankingLoss`) from three kinds of pairs:

* record text ↔ German preferred label of each gold subject (English and German records
  are pulled to the same German labels, so one model serves both languages);
* record ↔ record sharing a gold subject;
* English label ↔ German label of the same subject (where the vocabulary has both).

With ``embed_hard_negatives`` (> 0) the first epoch learns from these pairs alone; then the
model mines, for each record ↔ label pair, the labels it ranks highest that are not the
record's gold ones (`hard_negative_sets`), and the other epochs learn from those triplets
beside the remaining pairs.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, suppress
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.encode.static import StaticEmbeddingEncoder, StaticEncoderConfig
from tagalign.records import Record
from tagalign.runtime import quiet_libraries, release_free_memory
from tagalign.train.progress import quiet_trainer_class, train_with_progress
from tagalign.vocab import Vocabulary

log = logging.getLogger(__name__)


#: rows a `text_dataset` converts at a time
DATASET_PIECE = 50_000


def text_dataset(columns: dict[str, Sequence[str]], piece: int = DATASET_PIECE) -> Any:
    """``Dataset.from_dict(columns)``, converted ``piece`` rows at a time and concatenated
    (the same rows in the same order; a shuffle with a seed gives the same permutation).
    pyarrow's conversion of Python strings holds about as much again as the table it makes
    while it runs: at 1M records the encoder's 950,000 pairs (a record's text once per gold
    subject) rose the training's RSS by 5.9 GB for a 2.4 GB table (issue 48); in pieces
    the extra is one piece's (measured on 215,796 pairs: +0.66 GB at the peak, was +1.22)."""
    from datasets import Dataset, concatenate_datasets

    n = len(next(iter(columns.values()), []))
    if n <= piece:
        return Dataset.from_dict({k: list(v) for k, v in columns.items()})
    return concatenate_datasets([
        Dataset.from_dict({k: list(v[start:start + piece]) for k, v in columns.items()})
        for start in range(0, n, piece)])


def train_tokenizer(texts: Sequence[str], vocab_size: int, *, min_frequency: int = 2,
                    special_tokens: Sequence[str] = ("[UNK]", "[PAD]"),
                    limit_alphabet: int = 1000):
    """A WordPiece tokenizer whose vocabulary depends on nothing but ``texts``.

    tokenizers' ``WordPieceTrainer`` learns BPE merges and breaks count ties in hash-map
    order, so two runs on the same texts give different vocabularies and so different
    models (huggingface/tokenizers#1794; still so in 0.23). Its ``WordLevelTrainer`` sorts
    ties, so it does the counting here, and the WordPiece vocabulary is read off its
    ranking: the special tokens, the alphabet of the counted words (each character as a
    word start and as a ``##`` continuation, so no word falls back to ``[UNK]``), then the
    most frequent words, each also as a ``##`` continuation piece, so that a German
    compound splits into words the model knows (``holzschutzmittel`` → ``holzschutz``,
    ``##mittel``).
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    def pipeline(model: Any) -> Any:
        tok = Tokenizer(model)
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=False)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        return tok

    unk = "[UNK]" if "[UNK]" in special_tokens else special_tokens[0]
    counter = pipeline(models.WordLevel(unk_token=unk))
    counter.train_from_iterator(texts, trainer=trainers.WordLevelTrainer(
        vocab_size=2**31 - 1, min_frequency=min_frequency, special_tokens=[],
        show_progress=False))
    words = [w for w, _ in sorted(counter.get_vocab().items(), key=lambda kv: kv[1])]
    vocab: dict[str, int] = {}

    def add(token: str) -> None:
        if token not in vocab and len(vocab) < vocab_size:
            vocab[token] = len(vocab)

    for token in special_tokens:
        add(token)
    alphabet: dict[str, None] = {}  # first seen in the frequency ranking = most frequent first
    for w in words:
        alphabet.update(dict.fromkeys(w))
    for ch in list(alphabet)[:limit_alphabet]:
        add(ch)
        add("##" + ch)
    for w in words:
        if len(w) > 1:
            add(w)
            add("##" + w)
    tok = pipeline(models.WordPiece(vocab, unk_token=unk))
    tok.enable_truncation(512)
    return tok


def dropped_subjects(records: Sequence[Record], share: float, seed: int) -> frozenset[str]:
    """A seeded ``share`` of the distinct subjects ``records`` carry (sorted ids, drawn with
    their own generator: the other pairs are those made without dropout)."""
    if share <= 0:
        return frozenset()
    carried = sorted({sid for r in records for sid in r.subjects})
    rng = np.random.default_rng([seed, 66])
    n = round(share * len(carried))
    return frozenset(carried[i] for i in rng.choice(len(carried), n, replace=False).tolist())


def training_pairs(records: Sequence[Record], vocab: Vocabulary, seed: int = 13,
                   max_record_pairs: int = 50_000, label_pairs: bool = True,
                   label_dropout: float = 0.0) -> tuple[list[str], list[str], int]:
    """(anchors, positives, n): the pairs of the module docstring, the first ``n`` of them
    record ↔ label (those get mined hard negatives, `hard_negative_sets`).
    ``label_dropout``: the record ↔ label pairs of that share of the records' subjects are
    left out (`dropped_subjects`); their records still pair with each other and their
    labels with their English ones, as an unseen heading's do."""
    rng = np.random.default_rng(seed)
    dropped = dropped_subjects(records, label_dropout, seed)
    anchors: list[str] = []
    positives: list[str] = []
    by_subject: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        text = r.text
        for sid in r.subjects:
            subj = vocab.get(sid)
            if subj is None:
                continue
            by_subject[sid].append(i)
            if sid in dropped:
                continue
            anchors.append(text)
            positives.append(subj.label("de"))
    n_record_label = len(anchors)
    # record ↔ record sharing a (rare-ish) subject: rarer subjects are more informative
    pairs = 0
    order = rng.permutation(len(records))
    for i in order:
        r = records[i]
        cands = [s for s in r.subjects if 1 < len(by_subject.get(s, ())) <= 200]
        if not cands:
            continue
        s = cands[rng.integers(len(cands))]
        j = by_subject[s][rng.integers(len(by_subject[s]))]
        if j != i:
            anchors.append(r.text)
            positives.append(records[j].text)
            pairs += 1
            if pairs >= max_record_pairs:
                break
    for subj in vocab.subjects if label_pairs else ():
        if "en" in subj.labels and "de" in subj.labels and subj.labels["en"] != subj.labels["de"]:
            anchors.append(subj.labels["en"])
            positives.append(subj.labels["de"])
    return anchors, positives, n_record_label


class TokenCache:
    """A `StaticEmbedding`'s ``preprocess`` over texts tokenised once, up front.

    sentence-transformers' `StaticEmbedding.preprocess` runs the tokenizer on every batch.
    The training pairs repeat their texts (a record anchors one pair per gold subject, and
    every epoch reads them all again), and tokenising was about half of a training step
    on 2 cores (profiled: 37 ms a batch of 256 pairs; without it the full training set
    runs 18 batches a second instead of 9). Here each distinct text is
    tokenised once, in large batches; a batch is then looked up and concatenated. The ids
    and offsets are those `StaticEmbedding.preprocess` makes (tested), so the model
    learned is the same. A text not seen up front, or a prompt, goes to the module's own
    ``preprocess``. Set on the module instance during training only (`attach`/`detach`):
    the saved model is the plain `StaticEmbedding`."""

    def __init__(self, module: Any, texts: Sequence[str], chunk: int = 8192):
        self.module = module
        self.own = module.preprocess
        self.ids: dict[str, np.ndarray] = {}
        distinct = list(dict.fromkeys(texts))
        for start in range(0, len(distinct), chunk):
            part = distinct[start:start + chunk]
            for text, enc in zip(part, module.tokenizer.encode_batch(
                    part, add_special_tokens=False), strict=True):
                self.ids[text] = np.asarray(enc.ids, dtype=np.int64)

    def __call__(self, inputs: list[str], prompt: str | None = None, **kwargs: Any
                 ) -> dict[str, Any]:
        import torch

        found = [self.ids.get(t) if isinstance(t, str) else None for t in inputs]
        ids = [f for f in found if f is not None]
        if prompt or not inputs or len(ids) < len(found):
            return self.own(inputs, prompt=prompt, **kwargs)
        offsets = np.cumsum([0] + [len(f) for f in ids[:-1]])
        return {"input_ids": torch.from_numpy(np.concatenate(ids)),
                "offsets": torch.from_numpy(offsets)}

    def attach(self) -> None:
        self.module.preprocess = self

    def detach(self) -> None:
        if self.module.__dict__.get("preprocess") is self:
            del self.module.preprocess


def capped(records: Sequence[Record], limit: int | None, seed: int) -> Sequence[Record]:
    """``records``, or a seeded sample of ``limit`` of them (in their order) when there are
    more: what the encoder learns from (``embed_max_records``)."""
    if limit is None or len(records) <= limit:
        return records
    keep = np.sort(np.random.default_rng(seed).choice(len(records), limit, replace=False))
    log.info("the encoder learns from a seeded sample of %d of %d records "
             "(embed_max_records)", limit, len(records))
    return [records[i] for i in keep]


def untrained_module(records: Sequence[Record], vocab: Vocabulary,
                     config: StaticEncoderConfig) -> Any:
    """The encoder's `StaticEmbedding` before training: a tokenizer of ``vocab_size``
    tokens trained on the records' texts and every German and English label, and ``dim``
    random dimensions a token (torch's generator: seed it first)."""
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    label_texts = [s.label("de") for s in vocab.subjects]
    label_texts += [s.labels["en"] for s in vocab.subjects if "en" in s.labels]
    tokenizer = train_tokenizer([r.text for r in records] + label_texts,
                                config.vocab_size)
    return StaticEmbedding(tokenizer, embedding_dim=config.dim)


def train_static_encoder(records: Sequence[Record], vocab: Vocabulary,
                         config: StaticEncoderConfig, token_cache: bool = True,
                         threads: int = 0) -> StaticEmbeddingEncoder:
    """The encoder ``config`` describes (`StaticEncoderConfig.from_params`: the hybrid's
    ``embed_*`` parameters and ``seed``). ``token_cache``: tokenise each training text once
    (`TokenCache`); off, the module tokenises every batch (the same model, slower).
    ``threads``: torch's (the runtime's, `tagalign.runtime.Runtime.threads`; 0 leaves the
    process's)."""
    import torch
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        MultiDatasetBatchSamplers,
    )

    quiet_libraries()
    seed = config.seed
    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(threads)
    records = capped(records, config.max_records, seed)
    module = untrained_module(records, vocab, config)
    model = SentenceTransformer(modules=[module], device="cpu")
    anchors, positives, n_pairs = training_pairs(
        records, vocab, seed, label_pairs=config.label_pairs,
        label_dropout=config.label_dropout)
    data = text_dataset({"anchor": anchors, "positive": positives}).shuffle(seed=seed)
    epochs = float(config.epochs)
    # hard negatives: the first epoch on the pairs, the rest with mined negatives
    hard = config.hard_negatives if epochs > 1 else 0

    def arguments(n_epochs: float, **extra: Any) -> Any:
        # the trainer's scratch folder (saves nothing: save_strategy "no"); the standard
        # library's temporary folder ($TMPDIR, else /tmp), not a setting of ours
        out = Path(tempfile.gettempdir()) / f"tagalign-static-{os.getpid()}"
        return SentenceTransformerTrainingArguments(
            output_dir=str(out), num_train_epochs=n_epochs,
            per_device_train_batch_size=config.batch_size,
            learning_rate=float(config.lr), warmup_steps=0.05,
            batch_sampler=BatchSamplers.NO_DUPLICATES, save_strategy="no", report_to="none",
            logging_steps=100, seed=seed, use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0, **extra)

    cache = TokenCache(module, anchors + positives) if token_cache else None
    if cache is not None:
        cache.attach()
    try:
        trainer = quiet_trainer_class()(model=model, args=arguments(1.0 if hard else epochs),
                                        train_dataset=data,
                                        loss=MultipleNegativesRankingLoss(model))
        train_with_progress(trainer, "static encoder")
        if hard:
            sets = hard_negative_sets(model, anchors, positives, n_pairs, hard, seed)
            trainer = quiet_trainer_class()(
                model=model, train_dataset=sets, loss=MultipleNegativesRankingLoss(model),
                args=arguments(epochs - 1.0, multi_dataset_batch_sampler=(
                    MultiDatasetBatchSamplers.PROPORTIONAL)))
            train_with_progress(trainer, "static encoder, hard negatives")
    finally:
        if cache is not None:
            cache.detach()
    # the pairs' tables and token ids go, and their memory back to the system (pyarrow's
    # pool and glibc's heap keep freed pages otherwise: `release_memory`)
    data = cache = trainer = sets = None
    release_memory()
    model.to("cpu")
    return StaticEmbeddingEncoder(model)


def release_memory(collect: bool = True) -> None:
    """Give the mined sets' memory back to the system before the hybrid's next phases.
    Measured on split A's 225,314 pairs: mining grew RSS by 1.8 GB, and freeing the
    objects gave none of it back (pyarrow's mimalloc pool and glibc's heap keep freed
    pages); releasing the pool and trimming the heap (`release_free_memory`) returned
    1.6 GB. pyarrow does not release its pool on its own, hence the call here.
    ``collect=False``: without Python's cycle collection (a third of a second with a
    205k-subject vocabulary in memory: between mined pieces, whose data has no cycles)."""
    import gc

    if collect:
        gc.collect()
    with suppress(ImportError):  # pyarrow comes with `datasets`, which training needs
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    release_free_memory()


#: a mined negative must score below this share of its positive's cosine: a label scored
#: as high as a gold one is more likely an unassigned right subject than a wrong one
#: (sentence-transformers' `mine_hard_negatives` ``relative_margin``; its docs use 0.05)
HARD_MARGIN = 0.05
#: how deep in the model's ranking a negative is looked for (the best one under the margin)
HARD_RANGE = 50


@contextmanager
def no_bars() -> Iterator[None]:
    """Python's stderr swallowed: `mine_hard_negatives` shows encoding and search bars of
    its own (``show_progress_bar=True`` and a ``trange``, ``verbose`` or not), and a
    tagalign command shows one display (`tagalign.train.progress`). Log handlers keep
    the stream they hold, so log lines still show."""
    with redirect_stderr(io.StringIO()):
        yield


#: record ↔ label pairs mined at once. `mine_hard_negatives` holds several copies of the
#: pairs' texts (a pandas frame, lists, its output table): on split A of the 90k training
#: (225,314 pairs) it grew the training's RSS by 1.8 GB, so one call on the 682,662 pairs
#: of a 300k training would add about 5.5 GB (issue 48). More pairs than this are mined in
#: pieces of about this size, one piece's copies at a time (the same triplets). At 1M
#: records, pieces of 250,000 pairs still rose the encoder's RSS from 8.5 to 13.2 GB, the
#: training's peak, hence 100,000 (a 90k training mines in three pieces).
MINE_CHUNK = 100_000


def hard_negative_sets(model: Any, anchors: list[str], positives: list[str], n_pairs: int,
                       n_negatives: int, seed: int, chunk: int = MINE_CHUNK) -> Any:
    """The training sets after the first epoch: ``triplets`` — each record ↔ label pair
    (the first ``n_pairs``) with the ``n_negatives`` best-scored labels of the current model
    that are not gold for that record (sentence-transformers' `mine_hard_negatives`, over
    the training pairs' labels, `HARD_MARGIN`) — and ``pairs``: the other pairs, plus any
    record ↔ label pair for which no negative passed the margin (nothing is dropped).
    ``chunk``: more pairs than this are mined in pieces of about that many
    (`mine_in_chunks`)."""
    from datasets import DatasetDict

    mined = mine_in_chunks(model, anchors[:n_pairs], positives[:n_pairs], n_negatives, chunk)
    covered = set(zip(mined["anchor"], mined["positive"], strict=True))
    rest = [(a, p) for a, p in zip(anchors, positives, strict=True)
            if (a, p) not in covered]
    other = text_dataset({"anchor": [a for a, _ in rest], "positive": [p for _, p in rest]})
    log.info(f"hard negatives: {len(mined):,} of {n_pairs:,} record ↔ label pairs")
    return DatasetDict({"triplets": mined.shuffle(seed=seed), "pairs": other.shuffle(seed=seed)})


def mine_in_chunks(model: Any, anchors: list[str], positives: list[str], n_negatives: int,
                   chunk: int) -> Any:
    """`mine_hard_negatives` over the record ↔ label pairs, in pieces of about ``chunk``
    pairs. A piece holds every pair of its records (a record's gold labels are all kept
    out of its negatives, and its margin is its weakest gold label's), and every piece
    searches the same corpus, all the pairs' labels, embedded once (the miner's cache),
    fetching as many candidates per record as one call would (``range_max`` + the largest
    gold count of the call's records: the piece's ``range_max`` makes up for its own
    largest count). The triplets are those of one call, in its order (by record, first
    seen first; tests/test_static_model.py)."""
    from datasets import concatenate_datasets
    from sentence_transformers.util import mine_hard_negatives

    corpus = list(dict.fromkeys(positives))
    by_record: dict[str, list[int]] = {}
    for i, a in enumerate(anchors):
        by_record.setdefault(a, []).append(i)
    pieces: list[list[int]] = [[]]
    for rows in by_record.values():
        if pieces[-1] and len(pieces[-1]) + len(rows) > chunk:
            pieces.append([])
        pieces[-1].extend(rows)
    most = max(map(len, by_record.values()), default=0)
    out = []
    with tempfile.TemporaryDirectory(prefix="tagalign-mine-") as cache, no_bars():
        for rows in pieces:
            pairs = text_dataset({"anchor": [anchors[i] for i in rows],
                                       "positive": [positives[i] for i in rows]})
            fetch = HARD_RANGE + most - max(len(by_record[anchors[i]]) for i in rows)
            out.append(mine_hard_negatives(
                pairs, model, corpus=corpus, num_negatives=n_negatives,
                relative_margin=HARD_MARGIN, range_max=fetch, sampling_strategy="top",
                batch_size=1024, output_format="n-tuple" if n_negatives > 1 else "triplet",
                use_faiss=True, verbose=False, cache_folder=cache if len(pieces) > 1 else None))
            del pairs
            if len(pieces) > 1:
                release_memory(collect=False)
    return out[0] if len(out) == 1 else concatenate_datasets(out)
