"""The label index searched with the title too (issue 66: ``labels_title_top_k``, 30): a
record's text averages all it is about, its title names the topic; the title query's best
subjects join the text query's, each pair with the features of the queries that found it."""

from __future__ import annotations

import numpy as np
import pytest

from tagalign.encode.base import normalise
from tagalign.index import VectorIndex
from tagalign.records import Record
from tagalign.suggest.config import HybridConfig
from tagalign.suggest.sources.base import Batch, FitContext
from tagalign.suggest.sources.labels import LabelRetrieval
from tagalign.text import Analyzer
from tagalign.vocab import Subject, Vocabulary

N = 12
ROWS = np.eye(N, dtype=np.float32)  # subject i's row: the i-th axis
SIM, RANK, GAP, TSIM, TRANK = range(5)


def source(tmp_path, **config) -> LabelRetrieval:
    """A label source over `ROWS` (an exact index), saved and loaded as a model is."""
    vocab = Vocabulary([Subject(f"s{i}", {"de": f"Label {i}"}) for i in range(N)])
    src = LabelRetrieval(index="flat", **config)
    src.n_subjects_ = N
    src.index_ = VectorIndex("flat").build(ROWS)
    src.save(tmp_path)
    back = LabelRetrieval(index="flat", **config)
    back.load_state(tmp_path, FitContext(vocab, Analyzer()))
    return back


def query(*weights: tuple[int, float]) -> np.ndarray:
    v = np.zeros(N, np.float32)
    for i, w in weights:
        v[i] = w
    return normalise(v[None, :])[0]


def batch(texts: list[np.ndarray], titles: list[np.ndarray], title_words: list[str]) -> Batch:
    records = [Record(id=f"r{i}", title=t, abstract="x") for i, t in enumerate(title_words)]
    return Batch(records, ["de"] * len(records), embeddings=np.stack(texts),
                 title_embeddings=np.stack(titles))


def pairs(c) -> dict[tuple[int, int], np.ndarray]:
    return {(int(r), int(col)): f for r, col, f in zip(c.rows, c.cols, c.feats, strict=True)}


def test_the_titles_best_subjects_join_with_their_own_features(tmp_path):
    src = source(tmp_path, top_k=2, title_top_k=2)
    assert src.embeds_titles
    text = query((0, 0.6), (1, 0.5), (7, 0.2))  # text: 0, 1 best; the title: 7, then 1
    title = query((7, 0.9), (1, 0.4))
    got = pairs(src.candidates(batch([text, text], [title, text], ["Seven", "Same"])))
    assert set(got) == {(0, 0), (0, 1), (0, 7), (1, 0), (1, 1)}
    both = got[0, 1]  # found by both queries: both queries' features
    assert both[RANK] == 2 and both[TRANK] == 2
    assert both[SIM] == pytest.approx(text[1]) and both[TSIM] == pytest.approx(title[1])
    alone = got[0, 7]  # the title's alone: the text's similarity, no text rank
    assert alone[SIM] == pytest.approx(text[7]) and np.isnan(alone[RANK])
    assert alone[GAP] == pytest.approx(text[7] - text[0])
    assert alone[TRANK] == 1 and alone[TSIM] == pytest.approx(title[7])
    assert np.isnan(got[0, 0][[TSIM, TRANK]]).all()  # the text's alone
    # a record whose title and text are one query: the same subjects, both features
    assert got[1, 0][TRANK] == 1 and got[1, 1][TRANK] == 2


def test_the_cut_of_the_text_query_keeps_the_titles_candidates(tmp_path):
    src = source(tmp_path, top_k=3, title_top_k=1)
    text, title = query((0, 0.6), (1, 0.5), (2, 0.4)), query((9, 1.0))
    c = src.candidates(batch([text], [title], ["Nine"]))
    cut = pairs(c.truncate(1))
    assert set(cut) == {(0, 0), (0, 9)}  # the text's first, and the title's


def test_a_record_without_a_title_has_no_title_query(tmp_path):
    src = source(tmp_path, top_k=1, title_top_k=1)
    text, title = query((0, 1.0)), query((5, 1.0))
    got = pairs(src.candidates(batch([text, text], [title, title], ["Five", "  "])))
    assert set(got) == {(0, 0), (0, 5), (1, 0)}
    assert [int(r) for r in src.candidates(batch([text, text], [title, title],
                                                 ["Five", ""])).rows] == [0, 0, 1]


def test_without_a_title_query_the_title_features_are_empty(tmp_path):
    src = source(tmp_path, top_k=2, title_top_k=0)
    assert not src.embeds_titles and not (tmp_path / "title-query.json").exists()
    c = src.candidates(Batch([Record(id="r", title="t")], ["de"],
                             embeddings=query((3, 1.0))[None, :]))
    assert len(c.rows) == 2 and np.isnan(c.feats[:, [TSIM, TRANK]]).all()


def test_the_saved_models_title_query_wins_and_one_saved_before_has_none(tmp_path):
    src = source(tmp_path / "a", top_k=2, title_top_k=3)
    vocab = Vocabulary([Subject(f"s{i}", {"de": f"Label {i}"}) for i in range(N)])
    back = LabelRetrieval(index="flat", top_k=2, title_top_k=7)  # today's parameters
    back.load_state(tmp_path / "a", FitContext(vocab, Analyzer()))
    assert back.config.title_top_k == 3 == src.config.title_top_k
    (tmp_path / "a" / "title-query.json").unlink()  # as every model saved before it
    old = LabelRetrieval(index="flat", top_k=2)
    old.load_state(tmp_path / "a", FitContext(vocab, Analyzer()))
    assert old.config.title_top_k == 0 and not old.embeds_titles


def test_without_the_titles_embeddings_it_says_so(tmp_path):
    src = source(tmp_path, top_k=2, title_top_k=2)
    with pytest.raises(ValueError, match="titles' embeddings"):
        src.candidates(Batch([Record(id="r", title="t")], ["de"],
                             embeddings=query((3, 1.0))[None, :]))


def test_the_flat_name_reaches_the_source():
    config = HybridConfig.from_params({"labels_title_top_k": 20})
    assert config.new_source("labels").config.title_top_k == 20
    assert HybridConfig().labels.title_top_k == 30
