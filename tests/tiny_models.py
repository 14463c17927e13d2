"""Tiny models built inside tests: no download, seconds on a CPU.

The hybrid parameter sets every test shares live here (one definition each):

- `TINY_HYBRID`: Omikuji, TF-IDF neighbours and label matches on the tiny topics; the
  fast tier's one shared model (`tests/conftest.py`, fixture ``tiny_hybrid``) is
  `train_tiny_hybrid` with it.
- `KNN_LEXICAL_HYBRID`: only TF-IDF neighbours and label matches, no quality or agreement
  models: the cheapest hybrid, for tests that train one of their own.
- `SAMPLE_HYBRID`: the default sources with a small static encoder, for the seeded samples
  of the shared data (`samples.small_hybrid_case`).
"""

from __future__ import annotations

from pathlib import Path

from tagalign.records import Record
from tagalign.vocab import Subject, Vocabulary

#: a hybrid without an encoder (Omikuji, TF-IDF neighbours, label matches): trains on the
#: tiny records in seconds
TINY_HYBRID = {"sources": ["omikuji", "tfidf_knn", "lexical"], "ranker_rounds": 60,
               "holdout_fraction": 0.2}

#: the cheapest hybrid: TF-IDF neighbours and label matches, no quality or agreement model
KNN_LEXICAL_HYBRID = {"sources": ["tfidf_knn", "lexical"], "ranker_rounds": 10,
                      "holdout_fraction": 0.3, "quality": False, "agreement": False}

#: the default hybrid shrunk for the shared data's samples (small encoder vocabulary and
#: dimension, few ranker rounds): trains on a few hundred records in seconds
SAMPLE_HYBRID = {"embed_vocab_size": 3000, "embed_dim": 32, "embed_batch_size": 128,
                 "embed_label_pairs": False, "ranker_rounds": 60, "holdout_fraction": 0.2,
                 "knn_k": 10}

#: what `train_tiny_hybrid(zeppelins=True)` adds: records that tie words no other record
#: has to Epos, so that model's answers to them differ from any other tiny hybrid's
ZEPPELINS = "zeppelin airship blimp hangar"

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


def write_tiny_vocab(path: Path) -> Path:
    """`tiny_vocab` as a GND TSV file (id, German and English label) at ``path``."""
    path.write_text("gnd_id\tlabel_de\tlabel_en\n" + "".join(
        f"{s.id}\t{s.labels['de']}\t{s.labels['en']}\n" for s in tiny_vocab().subjects),
        encoding="utf-8")
    return path


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


def train_tiny_hybrid(path: Path, seed: int = 0, n: int = 120, zeppelins: bool = False
                      ) -> Path:
    """A `TINY_HYBRID` on the tiny vocabulary and ``n`` tiny records of ``seed`` (seconds);
    ``zeppelins``: and 12 records on `ZEPPELINS`, all about Epos (4015065-3)."""
    from tagalign.project import Project

    records = tiny_records(n, seed)
    if zeppelins:
        records += [Record(id=f"z{i}", title="Zeppelin", abstract=ZEPPELINS, language="de",
                           subjects=["4015065-3"]) for i in range(12)]
    Project.create(path, tiny_vocab(), "hybrid", TINY_HYBRID).train(records)
    return path
