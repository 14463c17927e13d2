"""Every benchmark script runs on today's code (issue 63; the index is benchmarks/README.md).

Each script (a module of the `benchmarks` package that runs as ``__main__``, found by
walking the package: a new script is covered without a line here) answers ``--help`` in
this process: it imports and its parser builds. The scripts that fit in seconds then run
on tiny data, through their ``main`` as ``python -m benchmarks.FOLDER.NAME`` calls it: the
shared ``tiny_hybrid`` and tiny records (tests/tiny_models.py), and the figure each prints
is checked. The others train on the shared data, need Ray, root or hours: the index's
"smoke" column says which and why. `benchmarks/run_tagging.py` runs on tiny data in
test_recipes_entrypoints.py."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tagalign.records.convert import write_jsonl
from tiny_models import KNN_LEXICAL_HYBRID, tiny_records, write_tiny_vocab

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def scripts() -> list[str]:
    """The package's scripts, as module names (``benchmarks.faults.__main__`` for a
    package run with ``-m``)."""
    names = []
    for path in sorted(BENCHMARKS.rglob("*.py")):
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            parts = path.relative_to(BENCHMARKS.parent).with_suffix("").parts
            names.append(".".join(parts))
    return names


def run_main(module: str, argv: list[str], monkeypatch) -> None:
    """``module``'s ``main`` with ``argv`` as its command line."""
    monkeypatch.setattr(sys, "argv", [module, *argv])
    importlib.import_module(module).main()


@pytest.mark.parametrize("module", scripts())
def test_every_script_answers_help(module, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_main(module, ["--help"], monkeypatch)
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def test_the_walk_finds_the_scripts_of_every_folder():
    found = scripts()
    assert "benchmarks.faults.__main__" in found and "benchmarks.run_tagging" in found
    assert {m.split(".")[1] for m in found} >= {
        "quality", "checks", "speed", "input", "scale", "serve", "pairs", "domains", "faults"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """The tiny vocabulary as a GND TSV, 120 tiny training records and 30 dev records
    (another seed), gzipped JSONL as the shared data's."""
    root = tmp_path_factory.mktemp("bench")
    write_jsonl(root / "train.jsonl.gz", tiny_records(120, seed=0))
    write_jsonl(root / "dev.jsonl.gz", tiny_records(30, seed=7))
    return {"vocab": str(write_tiny_vocab(root / "vocab.tsv")),
            "train": str(root / "train.jsonl.gz"), "dev": str(root / "dev.jsonl.gz"),
            "root": str(root)}


#: scripts on a saved project: (module, arguments after --project P, what the output holds)
ON_PROJECT = [
    ("benchmarks.speed.suggest_speed", ["--dev", "{dev}", "--jobs", "1"],
     [r"suggest --jobs 1 \(1 processes\): 30 records in", r'"avg_recall": 1\.0,']),
    ("benchmarks.speed.suggest_batch_profile", ["--dev", "{dev}", "--limit-dev", "20",
                                                "--batch", "10"],
     [r"serial path, batches of 10: \d+ records/s", r"source omikuji ",
      r"Tagger\.tag \(parts on threads\): 20 records in"]),
    ("benchmarks.speed.tfidf_search", ["--dev", "{dev}", "--limit-dev", "20",
                                       "--settings", "0.05:10"],
     [r"exact\s+[\d.]+\s+1\.000\s+[\d.]+\s+1\.000", r"prune 0\.05, rescore 10 "]),
    ("benchmarks.quality.hybrid", ["--dev", "{dev}"],
     [r"project .*, dev 30 records", r"hybrid\s+1\.0000 1\.0000"]),
    ("benchmarks.quality.tail", ["--train", "{train}", "--dev", "{dev}", "--simulated-new",
                                 "2", "--ceiling", "--workdir", "{root}/tail"],
     [r"dev 30 records \(seed 0: de 17, en 13\)", r"all     common\s+60\s+[01]\.\d{4}\s+[01]\.",
      r"all     unseen\s+0\.0%\s+0\s+0\s+–", r"common\s+100\.0%\s+60\s+30 1\.0000",
      r"simulated-new: 2 subjects withheld from \d+ training records; \d+ of them are left",
      r"10–49\s+2\s+100\.0%", r"simulated-new \(2 withheld\)\s+[\d.]+%\s+\d+\s+\d+ [01]\.\d{4}"]),
    ("benchmarks.quality.tail_reach", ["--train", "{train}", "--dev", "{dev}", "--limit-dev",
                                       "20", "--variant", "tfidf_knn.k=60,tfidf_knn.top_k=100",
                                       "--unseen-weight", "0.5"],
     [r"dev: 20 records \(seed 0\)", r"the unseen lift 0\.5",
      r"\(as trained\)\s+[\d.]+(\s+nan){4}\s+1\.0000\s+[01]\.\d{4}",
      r"tfidf_knn\.k=60,tfidf_knn\.top_k=100\s+[\d.]+(\s+nan){4}\s+1\.0000",
      r"gold: unseen 0, rare 0, common 40"]),
    ("benchmarks.quality.unseen_weight", ["--train", "{train}", "--dev", "{dev}",
                                          "--limit-dev", "20", "--grid", "0.5,1"],
     [r"half A: 10 records", r"half B: 10 records",
      r"   0\.00    A    [01]\.\d{4}    [01]\.\d{4}       nan",
      r"(?m)chosen on half A .*: 0\.0$"]),
    ("benchmarks.serve.suggest_profile", ["--records", "{dev}", "--requests", "10",
                                          "--warmup", "2"],
     [r"10 single-record requests", r"fusion: ranker predict\s+[\d.]+", r"total \(client\)"]),
    ("benchmarks.serve.serve_latency", ["--records", "{dev}", "--requests", "10", "--warmup",
                                        "2", "--clients", "2"],
     [r"sequential: 10 requests, p50 .* errors 0", r"2 concurrent clients: .* errors 0"]),
]


@pytest.mark.parametrize(("module", "argv", "printed"), ON_PROJECT,
                         ids=[m.rsplit(".", 1)[1] for m, _, _ in ON_PROJECT])
def test_script_on_the_tiny_project(module, argv, printed, tiny, tiny_hybrid, monkeypatch,
                                    capsys):
    run_main(module, ["--project", str(tiny_hybrid), *[a.format(**tiny) for a in argv]],
             monkeypatch)
    out = capsys.readouterr().out
    for pattern in printed:
        assert re.search(pattern, out), (pattern, out)


#: scripts on tiny files: (module, arguments, what the output holds)
ON_FILES = [
    ("benchmarks.input.bad_input", ["--dev", "{dev}", "--vocab", "{vocab}", "--repeat", "1",
                                    "--bad", "5"],
     [r"speed: dev\.jsonl\.gz, 30 records \(old reader 30\)",
      r"same ids in the same order: True", r"vocab\.tsv per-line loader .* 8 subjects"]),
    ("benchmarks.input.marc", ["--train", "{train}", "--dev", "{dev}", "--vocab", "{vocab}",
                               "--repeat", "1", "--rss-records", "100"],
     [r'marc \{.*"differs_from_jsonl": \{"count": 0,',
      r'marcxml \{.*"differs_from_jsonl": \{"count": 0,', r'"records": 120,']),
    ("benchmarks.quality.language_id", ["--dev", "{dev}", "--sample", "20"],
     [r"sample: 20 dev records \(seed 0\)",
      r"\| guess_language: simplemma, stop words on ties \(new\) \| [01]\.\d{4} \|"]),
    ("benchmarks.quality.tail", ["--train", "{train}", "--dev", "{dev}", "--vocab", "{vocab}",
                                 "--limit-train", "100", "--workdir", "{root}/tail-train",
                                 *[f"--param={k}={json.dumps(v)}"
                                   for k, v in KNN_LEXICAL_HYBRID.items()]],
     [r"train 100 records .* dev 30 records", r"hybrid trained on 100 records \(100 with gold\)",
      r"common\s+100\.0%\s+60\s+30 [01]\.\d{4}"]),
    ("benchmarks.quality.lexical_reach", ["--train", "{train}", "--dev", "{dev}", "--vocab",
                                          "{vocab}", "--limit-dev", "20"],
     [r"dev: 20 records with gold \(seed 0; ", r"counts on 120 train records",
      r"base\s+unseen 0\.000  rare 0\.000  common 0\.[5-9]\d\d ",
      r"near\+comp .* candidates a record, precision [01]\.\d{4}"]),
    ("benchmarks.quality.label_alignment", ["--train", "{train}", "--dev", "{dev}", "--vocab",
                                            "{vocab}", "--simulated-new", "2", "--dropout",
                                            "0", "0.5"],
     [r"train 120 records \(seed 0\), 2 subjects withheld",
      r"raw \(untrained\)\s+unseen", r"label_dropout=0\s+unseen",
      r"label_dropout=0\.5\s+unseen", r"simulated-new\s+[01]\.\d{4}\s+[01]\.\d{4}"]),
    ("benchmarks.serve.subject_search", ["--vocab", "{vocab}", "--queries", "5"],
     [r"8 subjects; 5 prefixes \(seed 0\)", r"GET …/subjects \(HTTP, localhost\) .*\(n=5\)"]),
]


@pytest.mark.parametrize(("module", "argv", "printed"), ON_FILES,
                         ids=[m.rsplit(".", 1)[1] for m, _, _ in ON_FILES])
def test_script_on_tiny_files(module, argv, printed, tiny, monkeypatch, capsys):
    run_main(module, [a.format(**tiny) for a in argv], monkeypatch)
    out = capsys.readouterr().out
    for pattern in printed:
        assert re.search(pattern, out), (pattern, out)


def test_behaviour_check_records_then_compares_same(tiny, tiny_hybrid, monkeypatch, capsys):
    ref = Path(tiny["root"]) / "ref.json"
    common = ["--project", str(tiny_hybrid), "--dev", tiny["dev"], "--limit-dev", "20"]
    run_main("benchmarks.checks.behaviour_check", ["record", *common, "--out", str(ref)],
             monkeypatch)
    assert "recorded 20 records" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        run_main("benchmarks.checks.behaviour_check", ["compare", *common, "--ref", str(ref)],
                 monkeypatch)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "records compared: 20" in out and out.rstrip().endswith("SAME")


def test_the_batch_profile_times_the_title_query(sample_hybrid, sample_case, tmp_path,
                                                 monkeypatch, capsys):
    """On a project with the label source (its title query on, as the default): the
    profile's own batches embed the titles too, or the source refuses them."""
    dev = tmp_path / "dev.jsonl.gz"
    write_jsonl(dev, sample_case[2])
    run_main("benchmarks.speed.suggest_batch_profile",
             ["--project", str(sample_hybrid), "--dev", str(dev), "--limit-dev", "20",
              "--batch", "10"], monkeypatch)
    out = capsys.readouterr().out
    assert re.search(r"encoder: titles\s+[\d.]+", out), out
    assert re.search(r"source labels\s+[\d.]+", out), out


def test_set_search_rebuilds_the_label_index_as_hnsw_and_sets_its_lists(tmp_path):
    """``labels.index=hnsw:M`` (issue 66's speed question: a graph over the headings
    instead of inverted lists) keeps every row and what it names; ``labels.ef_search``
    needs it; ``labels.nprobe`` sets the lists of both queries."""
    from types import SimpleNamespace

    from benchmarks._common import set_search
    from tagalign.encode.static import StaticEmbeddingEncoder
    from tagalign.records import Record
    from tagalign.suggest.sources.base import Batch, FitContext
    from tagalign.suggest.sources.labels import LabelRetrieval
    from tagalign.text import Analyzer
    from tagalign.vocab import Subject, Vocabulary
    from tiny_models import TOPICS, static_model

    encoder = StaticEmbeddingEncoder.load(static_model(tmp_path / "s", dim=32))
    vocab = Vocabulary(Subject(sid, {"de": label}) for sid, (label, _) in TOPICS.items())
    src = LabelRetrieval(top_k=3, index="flat", title_top_k=0, anchors=0)
    src.fit(FitContext(vocab, Analyzer(), encoder=encoder))
    texts = [text for _, text in TOPICS.values()]
    batch = Batch([Record(id=str(i), title=t) for i, t in enumerate(texts)],
                  ["de"] * len(texts), embeddings=encoder.encode(texts))
    project = SimpleNamespace(recipe=SimpleNamespace(pipeline_=SimpleNamespace(sources=[src])))
    flat = src.candidates(batch)
    rows = np.repeat(np.arange(len(texts)), len(vocab))
    cols = np.tile(np.arange(len(vocab)), len(texts))
    cos = src.score_pairs(batch, rows, cols)
    with pytest.raises(SystemExit, match="not HNSW"):
        set_search(project, ["labels.ef_search=16"])
    set_search(project, ["labels.nprobe=7"])
    assert src.config.nprobe == 7 and src.index_.nprobe == 7
    set_search(project, ["labels.index=hnsw:8", "labels.ef_search=16"])
    assert src.index_.kind == "hnsw" and src.index_.index_.hnsw.efSearch == 16
    assert src.index_.index_.hnsw.nb_neighbors(1) == 8  # M links a node above layer 0
    graph = src.candidates(batch)  # a handful of rows: the graph finds the exact top 3
    assert np.array_equal(graph.rows, flat.rows) and np.array_equal(graph.cols, flat.cols)
    assert np.allclose(graph.feats, flat.feats, atol=1e-6, equal_nan=True)
    assert np.allclose(src.score_pairs(batch, rows, cols), cos, atol=1e-6)
    with pytest.raises(SystemExit, match="hnsw or hnsw:M"):
        set_search(project, ["labels.index=ivf"])
