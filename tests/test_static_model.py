"""The hybrid's static encoder: a vocabulary and a model that depend only on the records,
and one progress display while it trains."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from samples import cut_vocabulary, seeded_sample
from tagalign.encode.static import StaticEncoderConfig
from tagalign.train.static_model import (
    TokenCache,
    capped,
    train_static_encoder,
    train_tokenizer,
)

CONFIG = StaticEncoderConfig(vocab_size=3000, dim=32, epochs=1, batch_size=64, lr=0.05,
                             label_pairs=False, hard_negatives=0, seed=3)


@pytest.fixture(scope="module")
def records(shared_data, gnd_vocab):
    return seeded_sample(shared_data / "llms4subjects/dev.jsonl.gz", gnd_vocab, 600, 6000, 5)


@pytest.fixture(scope="module")
def vocab(records, gnd_vocab):
    """The GND cut to the sample's gold headings: every pair the encoder learns from is
    the same, and its tokenizer counts their labels instead of all 283,000 of the GND's
    (2.7 s of each training here, and this module trains nine times)."""
    return cut_vocabulary(gnd_vocab, records)


@pytest.fixture(scope="module")
def trained(records, vocab):
    """The encoder `CONFIG` trains on ``records``, trained once for the tests that compare
    another training with it (none changes it: they encode and mine with it)."""
    return train_static_encoder(records, vocab, CONFIG)


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


def test_encoder_training_is_reproducible_and_prints_no_bars(records, vocab, trained,
                                                            capfd):
    texts = [r.text for r in records[:50]]
    a = train_static_encoder(records, vocab, CONFIG).encode(texts, show_progress=True)
    b = trained.encode(texts, batch_size=7)
    np.testing.assert_array_equal(a, b)  # chunking (8 batches a chunk) changes nothing
    out = capfd.readouterr()
    printed = out.out + out.err
    for library_output in ("it/s", "'loss'", "Batches"):  # tqdm bars, printed loss dicts
        assert library_output not in printed, printed[-500:]


def test_the_token_cache_gives_the_modules_own_ids_and_the_same_model(records, vocab,
                                                                     trained):
    """Tokenising each training text once (`TokenCache`) changes nothing the model learns:
    the batches it makes are `StaticEmbedding.preprocess`'s, and the trained weights are
    identical with and without it."""
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    texts = [r.text for r in records[:40]] + ["", "Holzschutzmittel"]
    module = StaticEmbedding(train_tokenizer(texts, 500), embedding_dim=8)
    cache = TokenCache(module, texts)
    cache.attach()
    assert module.preprocess is cache
    batch = texts[3:9] + [""] + texts[:2]
    got, own = module.preprocess(batch), cache.own(batch)
    assert got["input_ids"].dtype == own["input_ids"].dtype
    assert got["input_ids"].tolist() == own["input_ids"].tolist() and len(own["input_ids"]) > 50
    assert got["offsets"].tolist() == own["offsets"].tolist()
    assert module.preprocess(["never seen text"])["input_ids"].tolist() == \
        cache.own(["never seen text"])["input_ids"].tolist()  # falls back to the tokenizer
    cache.detach()
    assert "preprocess" not in module.__dict__
    probe = [r.text for r in records[:30]]
    with_cache = trained  # the default: tokenised once
    without = train_static_encoder(records, vocab, CONFIG, token_cache=False)
    np.testing.assert_array_equal(with_cache.encode(probe), without.encode(probe))
    assert "preprocess" not in with_cache.model[0].__dict__  # the saved module is plain


def test_hard_negatives_are_never_gold_and_no_pair_is_dropped(records, vocab, trained,
                                                              capfd):
    """After the first epoch each record ↔ label pair gets the best-scored label of the
    model that is not one of the record's gold labels (and passes the margin); the pairs
    without one, and the other pairs, stay as pairs: every pair is still learned."""
    from tagalign.train.static_model import hard_negative_sets, training_pairs

    encoder = trained
    capfd.readouterr()
    anchors, positives, n = training_pairs(records, vocab, 3, label_pairs=False)
    sets = hard_negative_sets(encoder.model, anchors, positives, n, 1, seed=3)
    out = capfd.readouterr()
    assert "it/s" not in out.out + out.err  # the miner's bars are not shown
    tri, rest = sets["triplets"].to_dict(), sets["pairs"].to_dict()
    assert len(tri["anchor"]) > 50
    assert len(tri["anchor"]) + len(rest["anchor"]) == len(anchors)
    learned = sorted(zip(tri["anchor"] + rest["anchor"], tri["positive"] + rest["positive"],
                         strict=True))
    assert learned == sorted(zip(anchors, positives, strict=True))
    gold: dict[str, set[str]] = {}
    for a, p in zip(anchors[:n], positives[:n], strict=True):
        gold.setdefault(a, set()).add(p)
    labels = set(positives[:n])
    for a, neg in zip(tri["anchor"], tri["negative"], strict=True):
        assert neg in labels and neg not in gold[a]
    # the mined negative is the model's hardest allowed one: it outscores a random label
    emb = encoder.model
    a_emb = emb.encode(tri["anchor"], normalize_embeddings=True)
    n_emb = emb.encode(tri["negative"], normalize_embeddings=True)
    r_emb = emb.encode(list(np.random.default_rng(0).choice(sorted(labels), len(a_emb))),
                       normalize_embeddings=True)
    assert (a_emb * n_emb).sum(1).mean() > (a_emb * r_emb).sum(1).mean() + 0.1

    # mined in pieces of about 40 pairs (issue 48: bounded memory), the same sets
    pieces = hard_negative_sets(encoder.model, anchors, positives, n, 1, seed=3, chunk=40)
    assert n > 4 * 40
    for name in ("triplets", "pairs"):
        assert pieces[name].to_dict() == sets[name].to_dict()


def test_hard_negative_epochs_train_a_different_model(records, vocab, capfd):
    """On half the sample (three trainings of two epochs, half the time): the models
    differ by 0.15 to 0.23 (max abs on the probe) with 300 records and seeds 3, 4, 5, 6
    (the vocabulary cut to the sample's headings), far above the 1e-3 asserted."""
    probe = [r.text for r in records[:30]]
    half = records[:300]
    config = replace(CONFIG, epochs=2)
    plain = train_static_encoder(half, vocab, config).encode(probe)
    hard = train_static_encoder(half, vocab, replace(config, hard_negatives=1))
    again = train_static_encoder(half, vocab, replace(config, hard_negatives=1))
    np.testing.assert_array_equal(hard.encode(probe), again.encode(probe))  # seeded
    assert np.abs(hard.encode(probe) - plain).max() > 1e-3
    out = capfd.readouterr()
    assert "it/s" not in out.out + out.err


def test_the_encoder_learns_from_a_seeded_sample_of_max_records(records, vocab, trained):
    """``embed_max_records`` (issue 48): with more training records than it, the encoder is
    the one trained on a seeded sample of that many (in their order); with fewer, on all."""
    sample = capped(records, 150, CONFIG.seed)
    assert len(sample) == 150 and len({r.id for r in sample}) == 150
    order = {r.id: i for i, r in enumerate(records)}
    assert [order[r.id] for r in sample] == sorted(order[r.id] for r in sample)
    assert [r.id for r in capped(records, 150, CONFIG.seed)] == [r.id for r in sample]
    assert [r.id for r in capped(records, 150, CONFIG.seed + 1)] != [r.id for r in sample]
    assert capped(records, len(records), CONFIG.seed) is records
    texts = [r.text for r in records[:30]]
    a = train_static_encoder(records, vocab, replace(CONFIG, max_records=150)).encode(texts)
    b = train_static_encoder(sample, vocab, CONFIG).encode(texts)
    everything = trained.encode(texts)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - everything).max() > 1e-3
    from tagalign.recipes.hybrid import HybridRecipe
    from tagalign.suggest.config import HybridConfig

    given = {**HybridRecipe.defaults, "embed_max_records": 150}
    assert HybridConfig.from_params(given).encoder.max_records == 150
    with pytest.raises(ValueError, match="embed_max_records"):
        HybridConfig.from_params({**given, "embed_max_records": 0})


def test_text_dataset_in_pieces_has_the_rows_and_shuffle_of_one_conversion():
    """`text_dataset` converts a piece of rows at a time (issue 48: pyarrow's conversion
    doubled the encoder's pairs in memory); its rows, their order and a seeded shuffle are
    those of one `Dataset.from_dict`."""
    from datasets import Dataset

    from tagalign.train.static_model import text_dataset

    columns = {"anchor": [f"record {i % 9} ä" for i in range(103)],
               "positive": [f"label {i}" for i in range(103)]}
    whole = Dataset.from_dict(columns)
    pieces = text_dataset(columns, piece=10)
    assert pieces.to_dict() == whole.to_dict() == columns
    assert pieces.shuffle(seed=3).to_dict() == whole.shuffle(seed=3).to_dict()
    assert pieces.shuffle(seed=3).to_dict() != pieces.to_dict()
    assert text_dataset(columns).to_dict() == columns  # one piece


def test_label_dropout_leaves_out_a_seeded_share_of_subjects_record_label_pairs(records,
                                                                                   vocab):
    from tagalign.train.static_model import dropped_subjects, training_pairs

    carried = {s for r in records for s in r.subjects if vocab.get(s) is not None}
    dropped = dropped_subjects(records, 0.3, 5)
    assert dropped == dropped_subjects(records, 0.3, 5)  # seeded
    assert dropped != dropped_subjects(records, 0.3, 6)
    assert dropped_subjects(records, 0.0, 5) == frozenset()
    n_carried = len({s for r in records for s in r.subjects})
    assert len(dropped) == round(0.3 * n_carried)
    full = training_pairs(records, vocab, 5, label_dropout=0.0)
    cut = training_pairs(records, vocab, 5, label_dropout=0.3)
    # the record ↔ label pairs: exactly those of the subjects not dropped, in the same order
    kept = [(r.text, vocab.get(s).label("de")) for r in records for s in r.subjects
            if vocab.get(s) is not None and s not in dropped]
    assert list(zip(cut[0][:cut[2]], cut[1][:cut[2]], strict=True)) == kept
    assert 0 < cut[2] < full[2]
    assert len(kept) < sum(s in carried for r in records for s in r.subjects)
    # the other pairs (records sharing a subject, English ↔ German labels) are unchanged
    assert cut[0][cut[2]:] == full[0][full[2]:] and cut[1][cut[2]:] == full[1][full[2]:]
