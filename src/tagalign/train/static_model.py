"""Bilingual contrastive static embeddings, trained from scratch on CPU (the hybrid's
encoder; it is used, saved and loaded as `tagalign.encode.static.StaticEmbeddingEncoder`).

A WordPiece tokenizer is trained on the records and subject labels; a sentence-transformers
`StaticEmbedding` (one vector per token, mean-pooled) learns with in-batch negatives
(`MultipleNegativesRankingLoss`) from three kinds of pairs:

* record text ↔ German preferred label of each gold subject (English and German records
  are pulled to the same German labels, so one model serves both languages);
* record ↔ record sharing a gold subject;
* English label ↔ German label of the same subject (where the vocabulary has both).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagalign.encode.static import StaticEmbeddingEncoder
from tagalign.records import Record
from tagalign.runtime import quiet_libraries
from tagalign.train.progress import quiet_trainer_class, train_with_progress
from tagalign.vocab import Vocabulary


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


def training_pairs(records: Sequence[Record], vocab: Vocabulary, seed: int = 13,
                   max_record_pairs: int = 50_000, label_pairs: bool = True
                   ) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    anchors: list[str] = []
    positives: list[str] = []
    by_subject: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        text = r.text
        for sid in r.subjects:
            subj = vocab.get(sid)
            if subj is None:
                continue
            anchors.append(text)
            positives.append(subj.label("de"))
            by_subject[sid].append(i)
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
    return anchors, positives


def train_static_encoder(records: Sequence[Record], vocab: Vocabulary,
                         params: dict[str, Any]) -> StaticEmbeddingEncoder:
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers


    quiet_libraries()
    seed = int(params.get("seed", 13))
    torch.manual_seed(seed)
    if params.get("threads"):
        torch.set_num_threads(int(params["threads"]))
    label_texts = [s.label("de") for s in vocab.subjects]
    label_texts += [s.labels["en"] for s in vocab.subjects if "en" in s.labels]
    tokenizer = train_tokenizer([r.text for r in records] + label_texts,
                                int(params["embed_vocab_size"]))
    module = StaticEmbedding(tokenizer, embedding_dim=int(params["embed_dim"]))
    model = SentenceTransformer(modules=[module], device="cpu")
    anchors, positives = training_pairs(records, vocab, seed,
                                        label_pairs=bool(params.get("embed_label_pairs", True)))
    data = Dataset.from_dict({"anchor": anchors, "positive": positives}).shuffle(seed=seed)
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"tagalign-static-{os.getpid()}"
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out),
        num_train_epochs=float(params["embed_epochs"]),
        per_device_train_batch_size=int(params["embed_batch_size"]),
        learning_rate=float(params["embed_lr"]),
        warmup_steps=0.05,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no",
        report_to="none",
        logging_steps=100,
        seed=seed,
        use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0,
    )
    trainer = quiet_trainer_class()(model=model, args=args, train_dataset=data,
                                         loss=MultipleNegativesRankingLoss(model))
    train_with_progress(trainer, "static encoder")
    model.to("cpu")
    return StaticEmbeddingEncoder(model)
