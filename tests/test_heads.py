"""R2/R3 heads, the margin loss and the shared head-training loop, on random tensors."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from tagalign.encode.heads import DimensionAttentionHead, FocusedEmbTransform
from tagalign.encode.heads.config import HeadTrainingConfig
from tagalign.params import ParamError
from tagalign.train.head_training import (
    _optimiser,
    epoch_negatives,
    gold_array,
    gold_means,
    hard_pool,
    recall_at,
    sample_negatives,
    train_head,
)
from tagalign.train.losses import MarginLoss, MultipleNegativesMarginLoss
from tagalign.train.losses.margin import cosine_distance


def test_nbf_head_is_the_published_architecture():
    d = 32
    head = DimensionAttentionHead(d)
    assert head(torch.randn(5, d)).shape == (5, d)
    assert (head.embed.in_features, head.embed.out_features) == (1, 16)
    assert (head.unembed.in_features, head.unembed.out_features) == (16, 1)
    layer = head.layer
    assert layer.norm_first and layer.self_attn.num_heads == 2
    assert layer.self_attn.head_dim == 8
    assert (layer.linear1.in_features, layer.linear1.out_features) == (16, 64)
    assert layer.dropout.p == pytest.approx(0.03)
    assert layer.activation is torch.nn.functional.relu
    linears = [m for m in head.mlp if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(d, 256), (256, 256),
                                                                   (256, d)]
    assert [m.p for m in head.mlp if isinstance(m, torch.nn.Dropout)] == [0.03, 0.03]


def test_nbf_attention_mixes_dimensions_before_the_mlp():
    """Each dimension is a token: the token stage alone (no MLP) lets dimension 0 change
    the output at dimension 5, which a per-dimension map could not."""
    torch.manual_seed(0)
    head = DimensionAttentionHead(8).eval()

    def tokens_only(x):
        return head.unembed(head.layer(head.embed(x.unsqueeze(-1)))).squeeze(-1)

    x = torch.randn(1, 8)
    y = x.clone()
    y[0, 0] += 3.0
    with torch.no_grad():
        delta = (tokens_only(y) - tokens_only(x)).abs()
    assert delta[0, 5] > 1e-4


def test_focused_transform_formula_and_alpha():
    torch.manual_seed(0)
    head = FocusedEmbTransform(16, hidden=32)
    assert torch.equal(head.alpha.data, torch.ones(16))
    x = torch.randn(4, 16)
    w1, w2 = head.mlp[0], head.mlp[2]
    expected = w2(torch.relu(w1(x)))
    torch.testing.assert_close(head(x), expected)
    with torch.no_grad():
        head.alpha[3] = 0.0
        head.alpha[4] = 2.0
    y = head(x)
    assert torch.all(y[:, 3] == 0)
    torch.testing.assert_close(y[:, 4], 2 * expected[:, 4])


@pytest.mark.parametrize("make", [lambda: DimensionAttentionHead(16, hidden=32),
                                  lambda: FocusedEmbTransform(16, hidden=24)])
def test_heads_save_and_load_as_folders_without_pickle(tmp_path, make):
    torch.manual_seed(1)
    head = make()
    with torch.no_grad():
        for p in head.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    head.save(tmp_path / "h")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["config.json",
                                                                  "model.safetensors"]
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["class"] == type(head).__name__ and config["dim"] == 16
    again = type(head).load(tmp_path / "h")
    x = np.random.default_rng(0).normal(size=(7, 16)).astype(np.float32)
    assert np.array_equal(head.transform(x), again.transform(x))
    other = FocusedEmbTransform if isinstance(head, DimensionAttentionHead) \
        else DimensionAttentionHead
    with pytest.raises(ValueError, match="holds a"):
        other.load(tmp_path / "h")


def test_batched_transform_equals_one_forward_and_keeps_no_graph():
    torch.manual_seed(2)
    head = DimensionAttentionHead(16)
    head.train()  # transform must switch dropout off and restore the mode
    x = np.random.default_rng(1).normal(size=(37, 16)).astype(np.float32)
    out = head.transform(x, batch_size=5)
    assert head.training
    with torch.no_grad():
        head.eval()
        whole = head(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, whole, rtol=1e-5, atol=1e-6)
    assert out.dtype == np.float32 and head.transform(x[:0]).shape == (0, 16)


def test_margin_loss_equals_hand_computation():
    """Record 1: d(a,p)=1−0.6=0.4; negatives at d=1 and d=0 → max(0,.2+.4−1)+max(0,.2+.4−0)
    = 0.6. Record 2: d(a,p)=0; d=1 and d=1−1/√2 → both terms clamp to 0. Mean 0.3."""
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]], requires_grad=True)
    p = torch.tensor([[0.6, 0.8], [0.0, 1.0]])
    n = torch.tensor([[[0.0, 1.0], [3.0, 0.0]], [[-1.0, 0.0], [1.0, 1.0]]])
    loss = MarginLoss(margin=0.2)(a, p, n)
    assert loss.item() == pytest.approx(0.3, abs=1e-6)
    loss.backward()
    assert a.grad is not None and torch.all(a.grad[1] == 0)  # record 2 contributes nothing
    assert float(cosine_distance(a[0].detach(), p[0])) == pytest.approx(0.4, abs=1e-6)
    assert MarginLoss(margin=1.5)(a, p, n).item() == pytest.approx(
        ((1.5 + 0.4 - 1) + (1.5 + 0.4) + (1.5 - 1) + (1.5 - (1 - 2 ** -0.5))) / 2, abs=1e-5)


def test_negatives_avoid_gold_and_gold_means_average():
    rng = np.random.default_rng(0)
    gold = [{0, 1, 2}, {3}]
    neg = sample_negatives(rng, 5, gold, 50)
    assert neg.shape == (2, 50)
    assert not set(neg[0]) & gold[0] and not set(neg[1]) & gold[1]
    assert set(neg[0]) == {3, 4}
    S = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.testing.assert_array_equal(gold_means([[0, 2], [4]], S), [[2, 3], [8, 9]])


def test_optimiser_and_schedule_follow_the_config():
    head = FocusedEmbTransform(4, hidden=4)
    opt, sched = _optimiser(head, HeadTrainingConfig(optimizer="adam", lr=1e-4,
                                                     weight_decay=1e-5, scheduler="step",
                                                     step_size=5, gamma=0.5))
    assert type(opt) is torch.optim.Adam and opt.param_groups[0]["weight_decay"] == 1e-5
    for _ in range(5):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-5)
    opt, sched = _optimiser(head, HeadTrainingConfig(epochs=20, t_max=20, eta_min=1e-6))
    assert type(opt) is torch.optim.AdamW
    for _ in range(20):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-6)
    with pytest.raises(ValueError, match="optimizer"):
        _optimiser(head, HeadTrainingConfig(optimizer="sgd"))
    cfg = HeadTrainingConfig.from_params({"lr": 3e-3, "encoder": "usem3", "epochs": 2})
    assert (cfg.lr, cfg.epochs, cfg.batch_size) == (3e-3, 2, 4)
    with pytest.raises(ParamError, match="parameter lr=0.0: must be > 0"):
        HeadTrainingConfig(lr=0.0)  # the ranges are the config's, the recipes' derived


@pytest.mark.parametrize("head_cls", [DimensionAttentionHead, FocusedEmbTransform])
def test_train_head_lowers_the_margin_loss(head_cls):
    """Records are noisy copies of a hidden rotation of their gold subjects' mean."""
    # Built here under a fixed seed: a head built at collection time would start from
    # whatever RNG state the modules imported before it left behind.
    torch.manual_seed(0)
    head = head_cls(16, hidden=32)
    rng = np.random.default_rng(0)
    S = rng.normal(size=(40, 16)).astype(np.float32)
    gold = [list(rng.choice(40, 2, replace=False)) for _ in range(96)]
    P = gold_means(gold, S)
    Q = np.linalg.qr(rng.normal(size=(16, 16)))[0].astype(np.float32)
    X = P @ Q + 0.05 * rng.normal(size=P.shape).astype(np.float32)
    cfg = HeadTrainingConfig(negatives=5, lr=3e-3, epochs=10, batch_size=8, t_max=10)
    losses = train_head(head, X, P, S, [set(g) for g in gold], cfg, show_progress=False)
    # Over eight init seeds the last/first ratio stays below 0.09 for both heads.
    assert len(losses) == 10 and losses[-1] < 0.3 * losses[0], losses
    assert not head.training


def test_sentence_transformers_margin_loss_matches_the_tensor_form(tmp_path):
    """The trainer-facing loss encodes (anchor, positive, negatives…) columns with the model
    and gives what the tensor form gives on those embeddings."""
    from sentence_transformers import SentenceTransformer

    from tiny_models import static_model

    model = SentenceTransformer(str(static_model(tmp_path / "m")), device="cpu")
    texts = [["neural network", "fungi wood"], ["machine model", "timber rot"],
             ["future trend", "ethics mind"], ["heritage", "online data"]]
    features = [model.tokenize(col) for col in texts]
    loss = MultipleNegativesMarginLoss(model, margin=0.3)(features)
    emb = [model.encode(col, convert_to_tensor=True) for col in texts]
    expected = MarginLoss(0.3)(emb[0], emb[1], torch.stack(emb[2:], dim=1))
    assert loss.item() == pytest.approx(expected.item(), abs=1e-5)
    loss.backward()  # gradients reach the encoder
    assert any(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("space", ["fixed", "siamese", "mixed"])
def test_subject_space_decides_what_passes_through_the_head(space):
    """With lr 0 the first epoch's loss is the loss of the untrained head, so it can be
    recomputed by hand from the same draws: siamese is MarginLoss(T(m), T(p), T(n)) —
    the positives and negatives pass through the head — fixed (and the mixed ablation,
    which only indexes differently) MarginLoss(T(m), p, n)."""
    torch.manual_seed(0)
    head = FocusedEmbTransform(8, hidden=16)
    rng = np.random.default_rng(3)
    S = rng.normal(size=(12, 8)).astype(np.float32)
    gold = [list(rng.choice(12, 2, replace=False)) for _ in range(6)]
    X, P = rng.normal(size=(6, 8)).astype(np.float32), gold_means(gold, S)
    # lr 1e-30: no float32 weight moves (a step of Adam is about lr), so the head after
    # training is the one that scored (the config refuses lr 0)
    cfg = HeadTrainingConfig(negatives=3, lr=1e-30, epochs=1, batch_size=6, seed=5,
                             subject_space=space)
    inputs: list[int] = []
    head.register_forward_hook(lambda _m, args, _out: inputs.append(len(args[0])))
    loss = train_head(head, X, P, S, [set(g) for g in gold], cfg, show_progress=False)[0]
    seen_by_head = list(inputs)
    draw = np.random.default_rng(5)
    order = draw.permutation(6)
    neg = epoch_negatives(draw, 12, gold_array([set(g) for g in gold])[order], 3)
    with torch.no_grad():
        def t(a):
            return head(torch.from_numpy(np.ascontiguousarray(a)))
        siamese = MarginLoss(0.2)(t(X[order]), t(P[order]), t(S[neg].reshape(-1, 8))
                                  .reshape(6, 3, 8)).item()
        fixed = MarginLoss(0.2)(t(X[order]), torch.from_numpy(P[order]),
                                torch.from_numpy(S[neg])).item()
    assert abs(siamese - fixed) > 0.05  # the two readings are different losses here
    if space == "siamese":
        assert seen_by_head == [6 + 6 + 6 * 3] and loss == pytest.approx(siamese, rel=1e-5)
    else:
        assert seen_by_head == [6] and loss == pytest.approx(fixed, rel=1e-5)


def test_siamese_gradients_reach_the_head_from_the_subject_side():
    """Records that are all zero give the anchor T(0) = a constant the head's last bias
    alone decides; in the siamese loss the first layer still gets a gradient through the
    subjects, in the fixed one it gets none (ReLU(b1) only, W1·0 = 0)."""
    rng = np.random.default_rng(0)
    S = rng.normal(size=(10, 4)).astype(np.float32)
    gold = [[0, 1], [2], [3, 4]]
    X = np.zeros((3, 4), np.float32)
    moved = {}
    for space in ("fixed", "siamese"):
        torch.manual_seed(0)
        head = FocusedEmbTransform(4, hidden=8)
        w1 = head.mlp[0].weight.detach().clone()
        train_head(head, X, gold_means(gold, S), S, [set(g) for g in gold],
                   HeadTrainingConfig(negatives=4, lr=1e-2, epochs=1, batch_size=3,
                                      subject_space=space), show_progress=False)
        moved[space] = float((head.mlp[0].weight.detach() - w1).abs().max())
    assert moved["fixed"] == 0.0 and moved["siamese"] > 1e-3


def test_subject_space_is_checked():
    with pytest.raises(ValueError, match="subject_space"):
        _ = HeadTrainingConfig(subject_space="both").siamese


def test_an_interrupted_run_resumes_from_its_checkpoint_to_the_same_head(tmp_path):
    """Two epochs, stop, then a run asked for four continues from the checkpoint: the
    losses and weights equal those of four uninterrupted epochs (dropout included)."""
    rng = np.random.default_rng(0)
    S = rng.normal(size=(20, 8)).astype(np.float32)
    gold = [list(rng.choice(20, 2, replace=False)) for _ in range(24)]
    X, P = rng.normal(size=(24, 8)).astype(np.float32), gold_means(gold, S)

    def run(epochs, checkpoint=None):
        torch.manual_seed(0)
        head = DimensionAttentionHead(8, hidden=16)
        cfg = HeadTrainingConfig(negatives=3, lr=1e-2, epochs=epochs, t_max=4, batch_size=8,
                                 subject_space="siamese")
        losses = train_head(head, X, P, S, [set(g) for g in gold], cfg, show_progress=False,
                            checkpoint=checkpoint)
        return head, losses

    whole, whole_losses = run(4)
    _, first = run(2, tmp_path / "ckpt")
    assert json.loads((tmp_path / "ckpt" / "state.json").read_text())["epochs_done"] == 2
    resumed, losses = run(4, tmp_path / "ckpt")
    assert losses[:2] == first and losses == pytest.approx(whole_losses, rel=1e-6)
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="another training configuration"):
        train_head(DimensionAttentionHead(8, hidden=16), X, P, S, [set(g) for g in gold],
                   HeadTrainingConfig(negatives=5, epochs=5), show_progress=False,
                   checkpoint=tmp_path / "ckpt")


@pytest.mark.parametrize("head_cls", [DimensionAttentionHead, FocusedEmbTransform])
def test_a_residual_head_starts_as_the_identity(head_cls):
    """Issue 21: with ``residual`` the untrained head (train or eval mode) returns its input,
    so step 0 ranks as the raw encoder; the published head does not."""
    torch.manual_seed(0)
    x = torch.randn(3, 16)
    head = head_cls(16, hidden=8, residual=True)
    torch.testing.assert_close(head(x), x)
    torch.testing.assert_close(head.eval()(x), x)
    assert not torch.allclose(head_cls(16, hidden=8)(x), x)


def test_the_sdpa_encoder_layer_equals_the_torch_module_in_eval_mode():
    """The head's own forward (SDPA on `nn.TransformerEncoderLayer`'s weights) gives what
    the module gives, so the architecture is the published one; attention dropout 0 changes
    only training."""
    torch.manual_seed(0)
    head = DimensionAttentionHead(24, attention_dropout=0.0).eval()
    tokens = torch.randn(3, 24, 16)
    torch.testing.assert_close(head.encoder_layer(tokens), head.layer(tokens))
    assert DimensionAttentionHead(24).attention_dropout == pytest.approx(0.03)


def test_epoch_negatives_and_the_hard_pool_avoid_gold():
    rng = np.random.default_rng(0)
    gold = [{0, 1}, {2}, {3, 4, 5}]
    padded = gold_array(gold)
    assert padded.tolist() == [[0, 1, -1], [2, -1, -1], [3, 4, 5]]
    neg = epoch_negatives(rng, 7, padded, 50)
    assert neg.shape == (3, 50) and all(not set(row) & g for row, g in zip(neg, gold, strict=True))
    S = np.eye(6, dtype=np.float32)
    X = np.array([[1, .9, .8, .7, 0, 0], [.1, .2, 1, .3, 0, 0], [.1, 0, .5, 1, .9, .8]],
                 dtype=np.float32)
    # raw ranks: record 0 → 0,1,2,3; record 1 → 2,3,1,0; record 2 → 3,4,5,2: gold left out
    assert hard_pool(X, S, padded, 2).tolist() == [[2, 3], [3, 1], [2, 0]]


def test_early_stopping_keeps_the_best_epoch_and_resumes(tmp_path):
    """Issue 21: with ``val_fraction`` the held-out slice is scored before training and
    after each epoch; the head returned is the best epoch's (its score is the best one),
    and a run resumed from the checkpoint keeps the scores and the best weights."""
    rng = np.random.default_rng(0)
    S = rng.normal(size=(30, 8)).astype(np.float32)
    gold = [list(rng.choice(30, 2, replace=False)) for _ in range(60)]
    P = gold_means(gold, S)
    X = P + 0.3 * rng.normal(size=P.shape).astype(np.float32)
    sets = [set(g) for g in gold]
    cfg = HeadTrainingConfig(negatives=4, lr=0.3, epochs=4, t_max=4, batch_size=16,
                             val_fraction=0.25, seed=1, subject_space="siamese")

    def run(epochs, checkpoint=None):
        torch.manual_seed(0)
        head = FocusedEmbTransform(8, hidden=16, residual=True)
        history: dict = {}
        train_head(head, X, P, S, sets, replace(cfg, epochs=epochs), show_progress=False,
                   checkpoint=checkpoint, history=history)
        return head, history

    head, history = run(4)
    val = np.sort(np.random.default_rng(2).choice(60, 15, replace=False))
    assert len(history["val"]) == 5 and history["best_epoch"] == int(np.argmax(history["val"]))
    with torch.no_grad():
        seen = np.unique(np.concatenate(gold))
        score = recall_at(head(torch.from_numpy(X[val])).numpy(),
                          head(torch.from_numpy(S[seen])).numpy(), [sets[i] for i in val],
                          rows=seen)
    assert score == pytest.approx(max(history["val"]))
    run(2, tmp_path / "ckpt")
    resumed, again = run(4, tmp_path / "ckpt")
    assert again == history
    for a, b in zip(head.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
