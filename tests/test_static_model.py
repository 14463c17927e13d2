"""The hybrid's static encoder: a vocabulary and a model that depend only on the records,
and one progress display while it trains."""

from __future__ import annotations

import numpy as np
import pytest

from samples import seeded_sample
from tagalign.train.static_model import train_static_encoder, train_tokenizer

PARAMS = {"embed_vocab_size": 3000, "embed_dim": 32, "embed_epochs": 1,
          "embed_batch_size": 64, "embed_lr": 0.05, "embed_label_pairs": False, "seed": 3}


@pytest.fixture(scope="module")
def records(shared_data, gnd_vocab):
    return seeded_sample(shared_data / "llms4subjects/dev.jsonl.gz", gnd_vocab, 600, 6000, 5)


def test_vocabulary_is_the_same_on_every_run(records):
    """tokenizers' WordPieceTrainer gave another vocabulary on each run (20 runs on the tiny
    test corpus: 20 different ones); the WordLevel ranking gives one."""
    texts = [r.text for r in records]
    vocabs = [train_tokenizer(texts, 2000).get_vocab() for _ in range(5)]
    assert all(v == vocabs[0] for v in vocabs[1:])
    assert len(vocabs[0]) == 2000
    assert vocabs[0]["[UNK]"] == 0 and vocabs[0]["[PAD]"] == 1


def test_compounds_split_into_known_words_and_nothing_is_unknown():
    tok = train_tokenizer(["holzschutz mittel", "mittel holzschutz", "pilze"], 100)
    assert tok.encode("Holzschutzmittel").tokens == ["holzschutz", "##mittel"]
    assert tok.encode("schimmel").tokens == ["s", "##c", "##h", "##i", "##m", "##m", "##e", "##l"]
    assert tok.encode("pilze").tokens == ["[UNK]"]  # seen once (< min_frequency): no "p"


def test_encoder_training_is_reproducible_and_prints_no_bars(records, gnd_vocab, capfd):
    texts = [r.text for r in records[:50]]
    a = train_static_encoder(records, gnd_vocab, PARAMS).encode(texts, show_progress=True)
    b = train_static_encoder(records, gnd_vocab, PARAMS).encode(texts, batch_size=7)
    np.testing.assert_array_equal(a, b)  # chunking (8 batches a chunk) changes nothing
    out = capfd.readouterr()
    printed = out.out + out.err
    for library_output in ("it/s", "'loss'", "Batches"):  # tqdm bars, printed loss dicts
        assert library_output not in printed, printed[-500:]
