"""Tiny models built inside tests: no download, seconds on a CPU."""

from __future__ import annotations

from pathlib import Path

from tagalign.records import Record
from tagalign.vocab import Subject, Vocabulary

TOPICS = {
    "4015065-3": ("Epos", "epic hero poem saga verse heroic song"),
    "4033447-8": ("Künstliche Intelligenz", "neural network learning machine model data"),
    "4046076-9": ("Pilze", "fungi mushroom wood rot timber mould decay"),
    "4025741-1": ("Holzschutz", "timber wood protection preservation coating beam"),
    "4045791-6": ("Philosophie", "ethics mind being truth reason philosophy"),
    "4123065-6": ("Digitalisierung", "digital computer online internet data software"),
    "4068097-6": ("Zukunft", "future forecast trend tomorrow scenario vision"),
    "4011455-7": ("Denkmalpflege", "monument heritage restoration building historic"),
}


def tiny_vocab() -> Vocabulary:
    return Vocabulary(Subject(sid, {"de": label, "en": words.split()[0]})
                      for sid, (label, words) in TOPICS.items())


def tiny_records(n: int = 120, seed: int = 0) -> list[Record]:
    import random

    rnd = random.Random(seed)
    ids = list(TOPICS)
    out = []
    for i in range(n):
        gold = rnd.sample(ids, 2)
        words = " ".join(rnd.choice(TOPICS[g][1].split()) for g in gold for _ in range(6))
        out.append(Record(id=f"r{i}", title=TOPICS[gold[0]][0], abstract=words,
                          language=rnd.choice(["de", "en"]), subjects=gold))
    return out


def train_tokenizer(texts: list[str], vocab_size: int = 300):
    """The package's own deterministic WordPiece builder (tokenizers' trainer is not)."""
    from tagalign.train.static_model import train_tokenizer as build

    return build(texts, vocab_size, min_frequency=1,
                 special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])


def corpus() -> list[str]:
    recs = tiny_records()
    return [r.text for r in recs] + [label for label, _ in TOPICS.values()]


def static_model(folder: Path, dim: int = 16, seed: int = 0) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    torch.manual_seed(seed)
    model = SentenceTransformer(modules=[StaticEmbedding(train_tokenizer(corpus()),
                                                         embedding_dim=dim)], device="cpu")
    model.save(str(folder))
    return folder


def tiny_bert(folder: Path, hidden: int = 32) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    tok = train_tokenizer(corpus())
    hf = folder / "hf"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(hf)
    cfg = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    BertModel(cfg, add_pooling_layer=False).save_pretrained(hf)
    st = SentenceTransformer(modules=[Transformer(str(hf), max_seq_length=64),
                                      Pooling(hidden, "mean")], device="cpu")
    st.save(str(folder / "st"))
    return folder / "st"
