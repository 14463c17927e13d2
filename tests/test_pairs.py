"""Ordinal pair scoring (issue 9): loaders, metrics, cut points, the bi-encoder, the CLI."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import pytest

from tagalign.pairs.data import Use, load_comedi, load_wic_jsonl
from tagalign.pairs.metrics import evaluate, krippendorff_alpha
from tagalign.pairs.thresholds import Thresholds, apply_cuts, even_cuts, fit_cuts
from tagalign.records import BadInputError, InputReport
from tiny_models import tiny_bert

WORDS = ("epic hero poem saga verse heroic song neural network learning machine model data "
         "fungi mushroom wood rot timber mould decay").split()
SENSES = {"bank": (["river", "water", "shore", "mud"], ["money", "loan", "account", "cash"]),
          "mouse": (["cat", "cheese", "tail", "hole"], ["click", "screen", "cursor", "pad"])}


# -- fixtures ---------------------------------------------------------------------------
def write_comedi(folder: Path, n_uses: int = 12, seed: int = 0, labels: bool = True
                 ) -> list[tuple[str, str, float]]:
    """A CoMeDi-layout language folder: uses of two lemmas with two senses each; a pair of
    the same sense is labelled 4 (or 3), of different senses 1 (or 2)."""
    rnd = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    uses, sense_of = [], {}
    for lemma, senses in SENSES.items():
        for i in range(n_uses):
            sense = i % 2
            left = " ".join(rnd.choice(senses[sense]) for _ in range(4))
            right = " ".join(rnd.choice(WORDS) for _ in range(3))
            context = f"{left} {lemma} {right}"
            start = len(left) + 1
            uid = f"{lemma}-{i}"
            sense_of[uid] = sense
            uses.append((uid, lemma, context, f"{start}:{start + len(lemma)}"))
    with open(folder / "uses.tsv", "w", encoding="utf-8") as fh:
        fh.write("identifier\tlemma\tcontext\tindices_target_token\n")
        for u in uses:
            fh.write("\t".join(u) + "\n")
    pairs = []
    for lemma in SENSES:
        ids = [u[0] for u in uses if u[1] == lemma]
        for a in range(len(ids)):
            for b in range(a + 1, min(len(ids), a + 4)):
                same = sense_of[ids[a]] == sense_of[ids[b]]
                pairs.append((ids[a], ids[b], rnd.choice([3.0, 4.0]) if same
                              else rnd.choice([1.0, 2.0])))
    with open(folder / "instances.tsv", "w", encoding="utf-8") as fh:
        fh.write("identifier1\tidentifier2\tlemma\n")
        for a, b, _ in pairs:
            fh.write(f"{a}\t{b}\t{a.split('-')[0]}\n")
    if labels:
        with open(folder / "labels.tsv", "w", encoding="utf-8") as fh:
            fh.write("identifier1\tidentifier2\tlemma\tmedian_cleaned\tjudgments\n")
            for a, b, label in pairs:
                fh.write(f"{a}\t{b}\t{a.split('-')[0]}\t{label}\t[{int(label)}]\n")
    return pairs


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def tiny_params(st: Path, **kw) -> dict:
    return {"base_model": f"st:{st}", "max_seq_length": 32, "batch_size": 8, "lr": 1e-3,
            "epochs": 1, "seed": 0, **kw}


# -- data -------------------------------------------------------------------------------
def test_comedi_loader_reads_quoted_uses_and_labels(tmp_path):
    pairs = write_comedi(tmp_path / "english")
    with open(tmp_path / "english" / "uses.tsv", "a", encoding="utf-8") as fh:
        fh.write('q-1\tbank\t"He said ""bank"" twice"\t9:13\n')
    loaded = load_comedi(tmp_path)
    assert len(loaded) == len(pairs)
    assert {p.language for p in loaded} == {"english"}
    assert [p.label for p in loaded] == [label for _, _, label in pairs]
    for p in loaded:
        assert p.use1.context[p.use1.start:p.use1.end] == p.lemma
    uses = {u.identifier: u for p in loaded for u in (p.use1, p.use2)}
    assert uses["bank-0"].context.split()[4] == "bank"


def test_malformed_uses_line_is_reported_with_its_line_and_skipped(tmp_path):
    folder = tmp_path / "german"
    written = write_comedi(folder, labels=False)
    lines = (folder / "uses.tsv").read_bytes().splitlines(keepends=True)
    # line 3 (bank-1): offsets beyond the context; line 5 (bank-3): not UTF-8
    uid, lemma, context, _ = lines[2].decode().rstrip("\n").split("\t")
    lines[2] = f"{uid}\t{lemma}\t{context}\t{len(context) - 1}:{len(context) + 5}\n".encode()
    lines[4] = lines[4].replace(b"bank", b"b\xe4nk", 1)
    (folder / "uses.tsv").write_bytes(b"".join(lines))
    report = InputReport(stream=io.StringIO())
    pairs = load_comedi(tmp_path, report)
    uses_tsv = str(folder / "uses.tsv")
    assert any(m.startswith(f"{uses_tsv}:3: target offsets") for m in report.skipped)
    assert any(m.startswith(f"{uses_tsv}:5: not valid UTF-8") for m in report.skipped)
    skipped_pairs = [m for m in report.skipped if "instances.tsv:" in m]
    assert skipped_pairs and all("bank-1" in m or "bank-3" in m for m in skipped_pairs)
    assert all(p.label is None for p in pairs)
    assert not any({"bank-1", "bank-3"} & {p.use1.identifier, p.use2.identifier}
                   for p in pairs)
    # every instance line is either loaded or reported: exactly those naming a bad use
    broken = [(a, b) for a, b, _ in written if {a, b} & {"bank-1", "bank-3"}]
    assert len(skipped_pairs) == len(broken) and len(pairs) == len(written) - len(broken)
    assert report.records_read == len(pairs)
    assert [(p.use1.identifier, p.use2.identifier) for p in pairs] == [
        (a, b) for a, b, _ in written if (a, b) not in broken]
    with pytest.raises(BadInputError, match=r"uses\.tsv:3"):
        load_comedi(tmp_path, InputReport(strict=True))


def test_wic_jsonl_maps_binary_labels(tmp_path):
    path = tmp_path / "wic.jsonl"
    rows = [{"sentence1": "a bank loan", "sentence2": "the bank of the river", "start1": 2,
             "end1": 6, "start2": 4, "end2": 8, "label": 0},
            {"sentence1": "a bank loan", "sentence2": "my bank account", "start1": 2,
             "end1": 6, "start2": 3, "end2": 7, "label": 1},
            {"sentence1": "x", "sentence2": "y", "start1": 0, "end1": 9, "start2": 0,
             "end2": 1, "label": 1}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n", "utf-8")
    report = InputReport(stream=io.StringIO())
    pairs = load_wic_jsonl(path, report=report)
    assert [p.label for p in pairs] == [2.0, 4.0]
    assert pairs[0].use2.context[4:8] == "bank"
    assert [m.split(": ")[0] for m in report.skipped] == [f"{path}:3", f"{path}:4"]


def _wic_rows(labels: list) -> str:
    return "".join(json.dumps({"sentence1": "a bank loan", "sentence2": "my bank account",
                               "start1": 2, "end1": 6, "start2": 3, "end2": 7, "label": x})
                   + "\n" for x in labels)


def test_wic_jsonl_keeps_a_graded_file_and_refuses_another_scale(tmp_path):
    graded = tmp_path / "graded.jsonl"
    graded.write_text(_wic_rows([1, 2.5, 4, 3]), "utf-8")
    assert [p.label for p in load_wic_jsonl(graded)] == [1.0, 2.5, 4.0, 3.0]
    binary = tmp_path / "binary.jsonl"
    binary.write_text(_wic_rows([1, 0, True, 1]), "utf-8")
    assert [p.label for p in load_wic_jsonl(binary)] == [4.0, 2.0, 4.0, 4.0]
    for labels, scale in (([0, 1, 5], "0..5"), ([0, 2, 3], "0..3"), ([-1, 1], "-1..1")):
        other = tmp_path / "other.jsonl"
        other.write_text(_wic_rows(labels), "utf-8")
        with pytest.raises(ValueError, match=rf"scale of {scale} .*neither binary"):
            load_wic_jsonl(other)


# -- metrics and cut points -------------------------------------------------------------
def _alpha_by_hand(a: list[int], b: list[int]) -> float:
    """Krippendorff's ordinal alpha from the coincidence matrix (two coders, no gaps)."""
    values = sorted(set(a) | set(b))
    idx = {v: i for i, v in enumerate(values)}
    o = np.zeros((len(values), len(values)))
    for x, y in zip(a, b, strict=True):
        o[idx[x], idx[y]] += 1
        o[idx[y], idx[x]] += 1
    n_c = o.sum(1)
    n = n_c.sum()
    d = np.zeros_like(o)
    for c in range(len(values)):
        for k in range(len(values)):
            lo, hi = min(c, k), max(c, k)
            d[c, k] = (n_c[lo:hi + 1].sum() - (n_c[c] + n_c[k]) / 2) ** 2
    expected = (np.outer(n_c, n_c) * d).sum()
    return 1 - (n - 1) * (o * d).sum() / expected


def test_alpha_matches_the_definition_on_a_hand_example():
    gold = [1, 1, 2, 2, 3, 3, 4, 4, 4, 4]
    pred = [1, 2, 2, 3, 3, 3, 4, 4, 3, 1]
    ours = krippendorff_alpha(gold, pred)
    assert ours == pytest.approx(_alpha_by_hand(gold, pred), abs=1e-9)
    assert ours == pytest.approx(0.5372580645161291, abs=1e-6)
    assert krippendorff_alpha(gold, gold) == pytest.approx(1.0)
    result = evaluate(gold + gold, pred + gold, ["en"] * 10 + ["de"] * 10)
    assert result["languages"]["de"]["alpha"] == pytest.approx(1.0)
    assert result["mean_alpha"] == pytest.approx((1.0 + ours) / 2)
    assert result["languages"]["en"]["confusion"][3] == [1, 0, 1, 2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cut_points_recover_known_ones_and_beat_even_spacing(seed):
    rng = np.random.default_rng(seed)
    true = np.array([0.4, 0.8, 0.88])  # far from evenly spaced
    edges = np.concatenate([[0.2], true, [0.95]])
    gold = rng.choice([1, 2, 3, 4], size=1500, p=[0.15, 0.15, 0.2, 0.5])
    scores = rng.uniform(edges[gold - 1], edges[gold]) + rng.normal(0, 0.01, len(gold))
    cuts = fit_cuts(scores, gold)
    assert np.abs(cuts - true).max() < 0.03
    fitted = krippendorff_alpha(gold, apply_cuts(scores, cuts))
    even = krippendorff_alpha(gold, apply_cuts(scores, even_cuts(scores)))
    assert fitted > 0.9 and fitted > even + 0.05


def test_thresholds_fall_back_to_pooled_cuts_and_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    gold = rng.integers(1, 5, 400)
    scores = gold / 4 + rng.normal(0, 0.05, 400)
    langs = ["en"] * 200 + ["de"] * 200
    th = Thresholds().fit(scores, gold, langs)
    assert set(th.cuts_) == {"*", "en", "de"}
    assert list(th.predict([0.3, 0.9], ["sv", "sv"])) == list(apply_cuts([0.3, 0.9],
                                                                         th.cuts_["*"]))
    th.save(tmp_path / "thresholds.json")
    assert Thresholds.load(tmp_path / "thresholds.json").cuts_ == th.cuts_
    bad = json.loads((tmp_path / "thresholds.json").read_text())
    bad["labels"] = [0, 1]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="label set"):
        Thresholds.load(tmp_path / "bad.json")


# -- model ------------------------------------------------------------------------------
def test_target_pooling_is_the_mean_of_the_target_tokens_by_hand():
    """Synthetic token embeddings (one fixed row per token id, so no context): two texts
    with the same target in other contexts, padded in one batch, pool to exactly the mean
    of the target's rows; their means over all tokens differ."""
    import torch

    from tagalign.pairs.pooling import TargetPooling

    torch.manual_seed(0)
    table = torch.randn(20, 4)
    pad, cls, sep, t_open, t_close = 0, 1, 2, 3, 4
    target = [11, 12, 13]  # a target of three sub-tokens
    rows = [[cls, 5, 6, t_open, *target, t_close, 7, sep],
            [cls, 8, t_open, *target, t_close, 9, 10, 14, 15, sep]]
    width = max(map(len, rows))
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    features = {"input_ids": ids, "attention_mask": mask, "token_embeddings": table[ids]}
    pooled = TargetPooling(4, t_open, t_close)(dict(features))["sentence_embedding"]
    by_hand = table[target].mean(0)
    for i, row in enumerate(rows):
        assert torch.allclose(pooled[i], by_hand, atol=1e-6), i
        whole = table[row].mean(0)  # what a fall-back to the whole sequence would give
        assert not torch.allclose(pooled[i], whole, atol=1e-3)
    assert not torch.allclose(table[rows[0]].mean(0), table[rows[1]].mean(0), atol=1e-3)
    # markers missing: the documented fall-back, the mean over the unpadded tokens
    plain = [cls, 5, 6, 7, sep]
    features = {"input_ids": torch.tensor([plain + [pad, pad]]),
                "attention_mask": torch.tensor([[1] * 5 + [0, 0]]),
                "token_embeddings": table[torch.tensor([plain + [pad, pad]])]}
    fallback = TargetPooling(4, t_open, t_close)(features)["sentence_embedding"][0]
    assert torch.allclose(fallback, table[plain].mean(0), atol=1e-6)


def test_scorer_with_target_pooling_pools_the_marked_word_only(tiny_st):
    """The built scorer end to end (tokenizer with markers, encode with padding): each
    usage's embedding is the mean of the transformer's outputs at the target word's
    sub-tokens, found from character offsets (not from the marker ids)."""
    import torch

    from tagalign.pairs.model import PairScorer

    scorer = PairScorer.build(tiny_params(tiny_st, pooling="target"), device="cpu")
    model, tok = scorer.model, scorer.model.tokenizer
    word = "mushroomtimber"  # two sub-tokens of the tiny vocabulary
    contexts = ["river water {} cash loan", "neural network learning {} epic hero poem saga"]
    uses = [Use(f"u{i}", word, c.format(word), c.index("{"), c.index("{") + len(word))
            for i, c in enumerate(contexts)]
    texts = [scorer.formatter(u) for u in uses]
    model.eval()
    with torch.no_grad():
        pooled = model.encode(texts, convert_to_tensor=True, batch_size=2)
        features = model.preprocess(texts)
        tokens = model[0](dict(features))["token_embeddings"]
    mask = features["attention_mask"]
    means = []
    for i, text in enumerate(texts):
        start = text.index("<t>") + len("<t>")
        end = text.index("</t>")
        enc = tok(text, return_offsets_mapping=True)
        n = len(enc["input_ids"])
        assert features["input_ids"][i, :n].tolist() == enc["input_ids"]
        inside = [k for k, (a, b) in enumerate(enc["offset_mapping"])
                  if a >= start and b <= end and b > a]
        assert tok.convert_ids_to_tokens([enc["input_ids"][k] for k in inside]) == [
            "mushroom", "##timber"]
        by_hand = tokens[i, inside].mean(0)
        assert torch.allclose(pooled[i], by_hand, atol=1e-5), i
        whole = tokens[i, :n].mean(0)  # all tokens: what a fall-back would give
        assert int(mask[i].sum()) == n
        assert (pooled[i] - whole).norm() > 0.05 * whole.norm()
        means.append(whole)
    # the contexts differ: mean pooling tells the two usages apart
    assert (means[0] - means[1]).norm() > 0.05 * means[0].norm()
    # the scorer's normalised rows are those pools, normalised
    emb = scorer.encode_uses(uses)
    for i, u in enumerate(uses):
        expected = torch.nn.functional.normalize(pooled[i], dim=0).numpy()
        np.testing.assert_allclose(emb[u], expected, atol=1e-5)


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_target_markers_survive_symmetric_truncation(tiny_st, where):
    from tagalign.pairs.model import PairScorer, UseFormatter

    scorer = PairScorer.build(tiny_params(tiny_st), device="cpu")
    tok = scorer.model.tokenizer
    left = {"start": 0, "middle": 60, "end": 120}[where]
    words = [WORDS[i % len(WORDS)] for i in range(left)] + ["mushroom"] + \
        [WORDS[(i * 7) % len(WORDS)] for i in range(120 - left)]
    start = len(" ".join(words[:left])) + (1 if left else 0)
    use = Use("u", "mushroom", " ".join(words), start, start + len("mushroom"))
    fmt = UseFormatter(tok, 24, prefix="query: ")
    text = fmt(use)
    assert text.startswith("query: ") and "<t>mushroom</t>" in text.replace("<t> ", "<t>")
    ids = tok(text)["input_ids"]
    assert len(ids) <= 24
    assert tok.convert_tokens_to_ids("<t>") in ids and tok.convert_tokens_to_ids("</t>") in ids
    body = text.removeprefix("query: ")
    before, after = body.split("<t>")[0], body.split("</t>")[1]
    n_before = len(tok(before, add_special_tokens=False)["input_ids"])
    n_after = len(tok(after, add_special_tokens=False)["input_ids"])
    if where == "middle":
        assert abs(n_before - n_after) <= 2
    short = Use("s", "bank", "a bank loan", 2, 6)
    assert fmt(short) == "query: a <t>bank</t> loan"


@pytest.mark.parametrize("loss_name", ["contrastive", "cosine", "cosent", "angle"])
def test_each_loss_lowers_its_loss_in_a_few_steps(tiny_st, tmp_path, loss_name):
    import torch

    from tagalign.pairs.losses import get_loss
    from tagalign.pairs.model import PairScorer
    from tagalign.pairs.training import training_columns

    write_comedi(tmp_path / "en")
    pairs = load_comedi(tmp_path)[:16]
    scorer = PairScorer.build(tiny_params(tiny_st, loss=loss_name), device="cpu")
    cols = training_columns(scorer, pairs)
    model = scorer.model
    loss = get_loss(loss_name).build(model)
    dtype = torch.long if loss_name == "contrastive" else torch.float

    def batch_loss() -> torch.Tensor:
        feats = [model.tokenize(cols["sentence1"]), model.tokenize(cols["sentence2"])]
        return loss(feats, torch.tensor(cols["label"], dtype=dtype))

    # Loss measured in eval mode (no dropout), so before/after compare the weights alone.
    # Margin, over seeds 0-5 of data, model and dropout: after/before ≤ 0.59 (cosent), ≤ 0.50
    # (angle), ≤ 0.12 (cosine), ≤ 0.005 (contrastive) after 16 steps; at lr 3e-3 or 8 steps
    # CoSENT and AnglE jump about (up to 0.99), which once failed CI.
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.eval()
    with torch.no_grad():
        before = float(batch_loss())
    model.train()
    for _ in range(16):
        opt.zero_grad()
        batch_loss().backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        after = float(batch_loss())
    assert after < before * 0.75, (before, after)


@pytest.mark.parametrize("pooling", ["mean", "target"])
def test_train_save_load_gives_identical_predictions(tiny_st, tmp_path, pooling):
    from tagalign.pairs.model import PairScorer, train

    write_comedi(tmp_path / "data" / "en", seed=0)
    write_comedi(tmp_path / "dev" / "en", n_uses=6, seed=1)
    scorer = PairScorer.build(tiny_params(tiny_st, pooling=pooling, epochs=2), device="cpu")
    epochs: list[dict] = []
    train(scorer, load_comedi(tmp_path / "data"), load_comedi(tmp_path / "dev"),
          tmp_path / "work", on_epoch=epochs.append)
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert all(-1 <= e["spearman"] <= 1 for e in epochs)
    scorer.save(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["params"]["pooling"] == pooling and "torch" in config["versions"]
    assert not list((tmp_path / "model").rglob("*.bin")) and not list(
        (tmp_path / "model").rglob("*.pkl"))
    loaded = PairScorer.load(tmp_path / "model", device="cpu")
    dev = load_comedi(tmp_path / "dev")
    labels_a, scores_a = scorer.predict(dev)
    labels_b, scores_b = loaded.predict(dev)
    assert np.array_equal(labels_a, labels_b)
    assert np.allclose(scores_a, scores_b, atol=1e-6)
    assert set(labels_a) <= {1, 2, 3, 4}


def _checksum(model) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_training_restores_exactly_the_best_epochs_weights(tiny_st, tmp_path, monkeypatch):
    """Three epochs whose dev Spearman is made 0.2, 0.9, 0.5 (the real cosines are kept):
    epoch 2 is best, so the weights after `train` are byte for byte epoch 2's (checksummed
    at each epoch's end), not epoch 3's, and the cut points use epoch 2's dev cosines."""
    import tagalign.pairs.model as pairs_model
    from tagalign.pairs.model import PairScorer, train

    write_comedi(tmp_path / "data" / "en", n_uses=6, seed=0)
    write_comedi(tmp_path / "dev" / "en", n_uses=6, seed=1)
    made_up = iter([0.2, 0.9, 0.5])
    real_dev_metrics = pairs_model.dev_metrics
    dev_scores: list[np.ndarray] = []

    def rigged(scorer, dev, progress=None):
        metrics = real_dev_metrics(scorer, dev, progress)
        dev_scores.append(metrics["scores"].copy())
        return {**metrics, "spearman": next(made_up)}

    monkeypatch.setattr(pairs_model, "dev_metrics", rigged)
    scorer = PairScorer.build(tiny_params(tiny_st, epochs=3, lr=3e-3), device="cpu")
    sums: dict[int, str] = {}
    train(scorer, load_comedi(tmp_path / "data"), load_comedi(tmp_path / "dev"),
          tmp_path / "work", on_epoch=lambda e: sums.setdefault(e["epoch"],
                                                                  _checksum(scorer.model)))
    assert list(sums) == [1, 2, 3] and len(set(sums.values())) == 3  # weights moved
    assert scorer.history[-1] == {"best_epoch": 2, "spearman": 0.9}
    assert [e["spearman"] for e in scorer.history[:-1]] == [0.2, 0.9, 0.5]
    assert _checksum(scorer.model) == sums[2]
    dev = [p for p in load_comedi(tmp_path / "dev") if p.label is not None]
    np.testing.assert_array_equal(scorer.score(dev), dev_scores[1])
    assert not np.array_equal(dev_scores[1], dev_scores[2])
    expected = scorer.new_thresholds().fit(dev_scores[1], [p.label for p in dev],
                                           [p.language for p in dev])
    assert scorer.thresholds.mode == "normalised"  # the recipe's default (issue 35)
    assert scorer.thresholds.cuts_ == expected.cuts_
    assert scorer.thresholds.stats_ == expected.stats_


def test_markers_train_when_train_layers_freezes_the_embeddings(tiny_st, tmp_path):
    """train_layers=1 freezes the embedding matrix with the lower layer: the two marker rows
    still move (a parameter of their own, folded back after training), every other row and
    the frozen layer stay byte for byte, and the folded model saves without extra keys."""
    import torch

    from tagalign.pairs.model import MARKERS, PairScorer, train

    write_comedi(tmp_path / "data" / "en", n_uses=6, seed=0)
    write_comedi(tmp_path / "dev" / "en", n_uses=6, seed=1)
    scorer = PairScorer.build(tiny_params(tiny_st, train_layers=1, lr=1e-2), device="cpu")
    body = scorer.model[0].auto_model
    emb = body.get_input_embeddings()
    ids = scorer.model.tokenizer.convert_tokens_to_ids(list(MARKERS))
    before = emb.weight.detach().clone()
    lower = body.encoder.layer[0].attention.self.query.weight.detach().clone()
    train(scorer, load_comedi(tmp_path / "data"), load_comedi(tmp_path / "dev"),
          tmp_path / "work")
    after = emb.weight.detach()
    others = torch.ones(len(after), dtype=torch.bool)
    others[ids] = False
    assert torch.equal(after[others], before[others])
    assert all(not torch.equal(after[i], before[i]) for i in ids)
    assert torch.equal(body.encoder.layer[0].attention.self.query.weight, lower)
    assert [n for n, _ in emb.named_parameters()] == ["weight"] and not emb._forward_hooks
    scorer.save(tmp_path / "model")
    loaded = PairScorer.load(tmp_path / "model", device="cpu")
    assert torch.equal(loaded.model[0].auto_model.get_input_embeddings().weight[ids],
                       after[ids])


def test_load_refuses_a_folder_without_markers(tiny_st, tmp_path):
    from tagalign.pairs.model import PairScorer

    scorer = PairScorer.build(tiny_params(tiny_st), device="cpu")
    scorer.thresholds = Thresholds()
    scorer.thresholds.cuts_ = {"*": [0.2, 0.5, 0.8]}
    scorer.save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["markers"] = ["[T]", "[/T]"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="markers"):
        PairScorer.load(tmp_path / "m", device="cpu")



def test_a_pairs_model_saved_without_a_format_loads(tiny_st, tmp_path):
    """Before the model families shared one manifest a pairs model had no ``format``: read
    as format 1; a format this version does not read is refused with the retrain message."""
    from tagalign.errors import ModelFormatError
    from tagalign.pairs.model import PairScorer

    scorer = PairScorer.build(tiny_params(tiny_st), device="cpu")
    scorer.thresholds = Thresholds()
    scorer.thresholds.cuts_ = {"*": [0.2, 0.5, 0.8]}
    scorer.save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert [config["format"], config["recipe"]] == [1, "ordinal-wic"]
    old = {k: config[k] for k in ("recipe", "params", "prompts", "markers", "history",
                                  "validation", "versions")}  # the old writer's keys
    (tmp_path / "m" / "config.json").write_text(json.dumps(old))
    loaded = PairScorer.load(tmp_path / "m", device="cpu")
    assert loaded.params == scorer.params and loaded.thresholds.cuts_ == scorer.thresholds.cuts_
    (tmp_path / "m" / "config.json").write_text(json.dumps({**old, "format": 2}))
    with pytest.raises(ModelFormatError, match=r"^pairs model .* model format 2; .* reads "
                                               r"formats 1: retrain the pairs model"):
        PairScorer.load(tmp_path / "m", device="cpu")


# -- CLI --------------------------------------------------------------------------------
def test_cli_train_predict_eval_round_trip(tiny_st, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tagalign import runtime
    from tagalign.cli import app, pairs_cmd  # noqa: F401 - registers `tagalign pairs`

    # --threads reaches the process's pin (recorded here, not done: it would hold for the
    # rest of the session; tests/test_settings.py shows the pin reaching torch)
    pins: list[int] = []
    monkeypatch.setattr(runtime, "set_threads", pins.append)

    for lang, seed in (("english", 0), ("german", 1)):
        write_comedi(tmp_path / "train" / lang, seed=seed)
        write_comedi(tmp_path / "dev" / lang, n_uses=6, seed=seed + 10)
    write_comedi(tmp_path / "test" / "swedish", n_uses=6, seed=5, labels=False)
    runner = CliRunner()
    out = runner.invoke(app, ["pairs", "train", str(tmp_path / "model"), "--train",
                              str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
                              "--base-model", f"st:{tiny_st}", "--loss", "cosent",
                              "--param", "epochs=1", "--param", "max_seq_length=32",
                              "--param", "lr=0.001", "--param", "batch_size=8",
                              "--device", "cpu", "--threads", "2"])
    assert out.exit_code == 0, out.output
    assert "dev Spearman" in out.output
    assert (tmp_path / "model" / "thresholds.json").exists()
    for src, dst in (("dev", "pred"), ("test", "pred-test")):
        out = runner.invoke(app, ["pairs", "predict", str(tmp_path / "model"), "--input",
                                  str(tmp_path / src), "--output", str(tmp_path / dst),
                                  "--device", "cpu", "--threads", "1"])
        assert out.exit_code == 0, out.output
    assert pins == [2, 1, 1]
    rows = (tmp_path / "pred" / "english.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["identifier1", "identifier2", "prediction", "cosine"]
    assert {r.split("\t")[2] for r in rows[1:]} <= {"1", "2", "3", "4"}
    assert (tmp_path / "pred-test" / "swedish.tsv").exists()  # pooled cut points
    out = runner.invoke(app, ["pairs", "eval", str(tmp_path / "dev"), str(tmp_path / "pred"),
                              "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert set(report["languages"]) == {"english", "german"}
    assert report["languages"]["english"]["pairs"] == len(rows) - 1
    assert report["spearman_of"] == "cosine"
    assert np.isclose(report["mean_alpha"], np.mean(
        [v["alpha"] for v in report["languages"].values()]))
    # gold scored against itself: alpha 1 in every language
    perfect = tmp_path / "perfect"
    perfect.mkdir()
    for lang in ("english", "german"):
        labels = (tmp_path / "dev" / lang / "labels.tsv").read_text().splitlines()[1:]
        (perfect / f"{lang}.tsv").write_text("identifier1\tidentifier2\tprediction\n" + "".join(
            f"{a}\t{b}\t{int(float(m))}\n" for a, b, _, m, _ in
            (x.split("\t") for x in labels)))
    out = runner.invoke(app, ["pairs", "eval", str(tmp_path / "dev"), str(perfect), "--json"])
    assert json.loads(out.stdout)["mean_alpha"] == pytest.approx(1.0)
    out = runner.invoke(app, ["pairs", "eval", str(tmp_path / "dev"), str(tmp_path / "nope")])
    assert out.exit_code == 1 and "not found" in out.output


def test_cli_train_fit_split_reports_alpha_on_the_held_out_dev_pairs(tiny_st, tmp_path):
    """--fit-split 0.5: half of each language's dev pairs (seeded) picks the epoch and fits
    the cut points; the alpha printed and kept in config.json is that of the other half,
    the same figure `pairs predict` + `evaluate` give on those pairs with the saved model."""
    from typer.testing import CliRunner

    from tagalign.cli import app, pairs_cmd  # noqa: F401 - registers `tagalign pairs`
    from tagalign.pairs.model import PairScorer, split_dev

    for lang, seed in (("english", 0), ("german", 1)):
        write_comedi(tmp_path / "train" / lang, n_uses=6, seed=seed)
        write_comedi(tmp_path / "dev" / lang, n_uses=8, seed=seed + 10)
    dev = load_comedi(tmp_path / "dev")
    fit, held = split_dev(dev, 0.5, seed=0)
    assert {(p.language, p.key) for p in fit}.isdisjoint({(p.language, p.key) for p in held})
    assert len(fit) + len(held) == len(dev)
    for lang in ("english", "german"):
        n = sum(p.language == lang for p in dev)
        assert sum(p.language == lang for p in fit) == n // 2
    assert [p.key for p in split_dev(dev, 0.5, seed=0)[1]] == [p.key for p in held]
    out = CliRunner().invoke(app, ["pairs", "train", str(tmp_path / "model"), "--train",
                                   str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
                                   "--base-model", f"st:{tiny_st}", "--loss", "cosent",
                                   "--param", "epochs=1", "--param", "max_seq_length=32",
                                   "--param", "lr=0.001",
                                   "--param", "batch_size=8", "--device", "cpu",
                                   "--fit-split", "0.5"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # rich wraps long lines
    assert f"{len(fit)} pairs fit" in text and f"{len(held)} held out" in text
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    figure = config["history"][-1]["held_out_dev"]
    assert figure["pairs"] == len(held) and figure["fit_split"] == 0.5
    assert f"mean alpha {figure['mean_alpha']:.4f}" in text
    assert "Computing widget examples" not in out.output  # one progress display (issue 23)
    labels, scores = PairScorer.load(tmp_path / "model", device="cpu").predict(held)
    again = evaluate([p.label for p in held], labels, [p.language for p in held], scores)
    assert figure["mean_alpha"] == pytest.approx(again["mean_alpha"], abs=1e-9)
    assert figure["spearman"] == pytest.approx(again["spearman"], abs=1e-6)
    bad = CliRunner().invoke(app, ["pairs", "train", str(tmp_path / "m2"), "--train",
                                   str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
                                   "--fit-split", "1.5"])
    assert bad.exit_code == 2 and "strictly between 0 and 1" in bad.output


def test_pairs_params_allow_epochs_zero_for_the_untuned_floor():
    from tagalign.pairs.params import check_params
    from tagalign.params import ParamError

    check_params({"epochs": 0})  # the benchmark's floor row: no training, cut points only
    with pytest.raises(ParamError, match="epochs=-1"):
        check_params({"epochs": -1})


# -- presets (issue 49) -----------------------------------------------------------------
def test_preset_follows_the_device_and_an_explicit_name_wins():
    from tagalign.errors import InputError
    from tagalign.pairs.presets import CPU, PUBLISHED, choose

    assert choose(None, None, cuda_available=False) == (CPU, "no GPU is present")
    assert choose(None, None, cuda_available=True) == (PUBLISHED, "a GPU is present")
    assert choose(None, "cpu", cuda_available=True)[0] is CPU  # --device cpu on a GPU box
    assert choose(None, "cuda:0", cuda_available=False)[0] is PUBLISHED
    assert choose("published", None, cuda_available=False) == (PUBLISHED, "asked for")
    with pytest.raises(InputError, match="unknown preset 'gpu'.*cpu.*published"):
        choose("gpu", None, cuda_available=False)
    # the cpu preset is the cross-validated CPU setting; explicit parameters win over it
    assert CPU.apply({"epochs": 2, "lr": 1e-3}) == {
        "loss": "cosent", "limit_pairs": 8000, "epochs": 2, "max_seq_length": 96,
        "train_layers": 3, "lr": 1e-3, "batch_size": 16, "train_markers": False}
    assert PUBLISHED.apply({"epochs": 2}) == {"epochs": 2}  # the recipe's defaults


def test_cli_train_without_params_takes_the_cpu_preset_and_tells_the_expected_time(
        tiny_st, tmp_path):
    from typer.testing import CliRunner

    from tagalign.cli import app, pairs_cmd  # noqa: F401 - registers `tagalign pairs`
    from tagalign.pairs.model import PairScorer

    for lang, seed in (("english", 0), ("german", 1)):
        write_comedi(tmp_path / "train" / lang, n_uses=8, seed=seed)
        write_comedi(tmp_path / "dev" / lang, n_uses=6, seed=seed + 10)
    args = ["pairs", "train", "--train", str(tmp_path / "train"), "--dev",
            str(tmp_path / "dev"), "--base-model", f"st:{tiny_st}", "--device", "cpu"]
    out = CliRunner().invoke(app, [*args[:2], str(tmp_path / "model"), *args[2:]])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "preset cpu (no GPU is present)" in text
    assert "given explicitly: base_model" in text
    n_pairs = sum(1 for p in load_comedi(tmp_path / "train") if p.label is not None)
    steps = -(-n_pairs // 16)  # all pairs (fewer than 8,000), batch 16, 1 epoch
    assert f"training: {steps} steps of 16 pairs;" in text and "pairs/s" in text
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["preset"] == "cpu"
    assert {k: config["params"][k] for k in ("loss", "epochs", "max_seq_length",
                                             "train_layers", "lr", "batch_size",
                                             "limit_pairs", "train_markers")} == {
        "loss": "cosent", "epochs": 1, "max_seq_length": 96, "train_layers": 3, "lr": 5e-5,
        "batch_size": 16, "limit_pairs": 8000, "train_markers": False}
    assert PairScorer.load(tmp_path / "model", device="cpu").preset == "cpu"
    # --param wins over the preset; --preset published is the recipe's defaults
    out = CliRunner().invoke(app, [*args[:2], str(tmp_path / "m2"), *args[2:], "--preset",
                                   "published", "--param", "epochs=1", "--param",
                                   "max_seq_length=32", "--loss", "cosent"])
    assert out.exit_code == 0, out.output
    assert "preset published (asked for)" in " ".join(out.output.split())
    config = json.loads((tmp_path / "m2" / "config.json").read_text())
    assert (config["preset"], config["params"]["epochs"], config["params"]["lr"],
            config["params"]["train_layers"], config["params"]["loss"]) == (
        "published", 1, 1e-5, None, "cosent")
    bad = CliRunner().invoke(app, [*args[:2], str(tmp_path / "m3"), *args[2:], "--preset",
                                   "gpu"])
    assert bad.exit_code != 0 and "unknown preset 'gpu'" in bad.output
    # a model saved before presets (no "preset" in config.json) loads with none
    del config["preset"]
    (tmp_path / "m2" / "config.json").write_text(json.dumps(config))
    assert PairScorer.load(tmp_path / "m2", device="cpu").preset is None
