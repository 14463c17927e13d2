"""One source per setting (`tagalign.runtime`): the default limit has one definition, the
environment is read once per process, and a runtime's threads reach the classifiers and
the pair scorer's process."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import tagalign
from tagalign import runtime as runtime_module
from tagalign.classify import Classifier, Example, get_classifier
from tagalign.cli import app
from tagalign.project import DEFAULT_LIMIT as PROJECT_LIMIT
from tagalign.project.config import ProjectConfig
from tagalign.runtime import DEFAULT_LIMIT, Environment, Runtime
from tagalign.serve.service import OWN_DEFAULT_LIMIT
from tiny_models import TOPICS, tiny_records, tiny_vocab

SRC = Path(tagalign.__file__).parent
runner = CliRunner()

# -- the default limit ------------------------------------------------------------------

#: functions whose ``limit`` of 20 is another setting than the subjects per record
OTHER_LIMITS = {("vocab/vocabulary.py", "search")}  # label search results
LIMIT_NAMES = {"limit", "fallback_limit", "default_limit"}


def _spelled(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == DEFAULT_LIMIT


def _literal_limits(path: Path) -> list[str]:
    """Where ``path`` spells the default limit as its number: a parameter default or a
    keyword argument named like a limit (other limits — a demo's 10, a warm-up's 1 — are
    settings of their own)."""
    rel = path.relative_to(SRC).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if (rel, node.name) in OTHER_LIMITS:
                continue
            args = node.args
            named = args.posonlyargs + args.args
            pairs = list(zip(named[len(named) - len(args.defaults):], args.defaults,
                             strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                      if d is not None]
            found += [f"{rel}:{d.lineno} {node.name}({a.arg}={d.value})" for a, d in pairs
                      if a.arg in LIMIT_NAMES and _spelled(d)]
        elif isinstance(node, ast.Call):
            found += [f"{rel}:{k.value.lineno} {k.arg}={k.value.value}" for k in node.keywords
                      if k.arg in LIMIT_NAMES and _spelled(k.value)]
    return found


def test_the_default_limit_has_one_definition():
    """No module spells the subjects per record as a number: the recipes, the pipeline,
    the project, the service and the CLI import `tagalign.runtime.DEFAULT_LIMIT`."""
    spelled = [hit for path in sorted(SRC.rglob("*.py")) for hit in _literal_limits(path)]
    assert spelled == []
    assert PROJECT_LIMIT is DEFAULT_LIMIT and OWN_DEFAULT_LIMIT is DEFAULT_LIMIT
    assert ProjectConfig().defaults() == (DEFAULT_LIMIT, 0.0)
    assert DEFAULT_LIMIT == 20  # the default itself is unchanged
    res = runner.invoke(app, ["suggest", "--help"], env={"COLUMNS": "300"})
    assert f"else {DEFAULT_LIMIT})" in " ".join(res.output.split())


def test_the_guard_sees_a_number_spelled_out(tmp_path, monkeypatch):
    """`_literal_limits` finds both spellings it guards against."""
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "m.py").write_text("def f(records, limit: int = 20):\n"
                              "    return g(limit=20) + h(limit=10)\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", src)
    assert _literal_limits(src / "m.py") == ["m.py:1 f(limit=20)", "m.py:2 limit=20"]


# -- the environment --------------------------------------------------------------------

#: the environment variables read outside `tagalign.runtime.environment`, each where a
#: process starts or where a library demands it (docs/architecture.md lists them)
OTHER_READS = {"MULTIPROC_ENV", "PROMETHEUS_DIR_ENV", "SETTINGS_ENV", '"TAGALIGN_DATA"',
               '"RAY_ADDRESS"'}
READ = re.compile(r"os\.environ\.get\(\s*([^,)]+)|os\.getenv\(\s*([^,)]+)"
                  r"|os\.environ\[([^\]]+)\](?!\s*=[^=])")


def test_nothing_else_reads_the_environment():
    reads = {(path.relative_to(SRC).as_posix(), next(g for g in m.groups() if g).strip())
             for path in SRC.rglob("*.py") for m in READ.finditer(path.read_text("utf-8"))}
    assert {name for _, name in reads} <= OTHER_READS, sorted(reads)
    assert "getenv" not in (SRC / "runtime.py").read_text("utf-8")


def test_environment_values_are_parsed_once_into_settings(tmp_path):
    assert Environment.read({"OMP_NUM_THREADS": "3", "TAGALIGN_CACHE": str(tmp_path)}) == \
        Environment(threads=3, cache_dir=tmp_path)
    for raw in ("", "0", "-2", "two", " "):
        assert Environment.read({"OMP_NUM_THREADS": raw}).threads == 0
    assert Environment.read({}).cache_dir == Path.home() / ".cache" / "tagalign"
    assert Environment.read({"TAGALIGN_CACHE": ""}).cache_dir == \
        Path.home() / ".cache" / "tagalign"


def test_changing_the_environment_after_start_up_changes_no_runtime(monkeypatch, tmp_path):
    made = Runtime()
    threads, cache = made.n_threads, made.cache_dir
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads + 3))
    monkeypatch.setenv("TAGALIGN_CACHE", str(tmp_path))
    assert (made.n_threads, made.cache_dir) == (threads, cache)
    later = Runtime()  # made after the change: the environment as the process started
    assert (later.n_threads, later.cache_dir) == (threads, cache)
    assert later.threads_or(1) == made.threads_or(1)


def test_a_process_reads_its_environment_once_at_start_up(tmp_path):
    code = ("import os; from tagalign.runtime import Runtime\n"
            "first = Runtime()\n"
            "os.environ['OMP_NUM_THREADS'] = '7'; os.environ['TAGALIGN_CACHE'] = 'elsewhere'\n"
            "second = Runtime()\n"
            "print(first.n_threads, second.n_threads, second.threads_or(1), "
            "Runtime(threads=1).n_threads, second.cache_dir)\n")
    env = {**os.environ, "OMP_NUM_THREADS": "3", "TAGALIGN_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["3", "3", "3", "1", str(tmp_path)]


def test_a_runtime_pin_reaches_torch_loaded_after_it():
    """The pair scorer's only threads are torch's, which it loads after the command made
    its runtime: the pin reaches it (`set_threads` sets what torch reads as it loads)."""
    code = ("from tagalign.cli.common import make_runtime\n"
            "make_runtime(1)\n"
            "import torch; print(torch.get_num_threads())\n")
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["1"]


# -- threads reach the classifiers --------------------------------------------------------

DOMAIN = dict(zip(TOPICS, ["lit", "inf", "bau", "bau", "lit", "inf", "inf", "bau"],
                  strict=True))


def examples(n: int, seed: int, prefix: str) -> list[Example]:
    out = []
    for i, r in enumerate(tiny_records(n, seed)):
        ex = Example(f"{prefix}{i}", r.text, sorted({DOMAIN[s] for s in r.subjects}),
                     r.language, subjects=list(r.subjects))
        ex.suggested = [(s, 0.9 - 0.2 * j) for j, s in enumerate(r.subjects)]
        out.append(ex)
    return out


@pytest.fixture
def liblinear_jobs(monkeypatch) -> list:
    """The threads each liblinear fit of `linear-ngrams` ran in (its labels' pool)."""
    from concurrent import futures

    seen: list = []
    real = futures.ThreadPoolExecutor

    def spy(max_workers=None, *args, **kw):
        seen.append(max_workers)
        return real(max_workers, *args, **kw)

    monkeypatch.setattr(futures, "ThreadPoolExecutor", spy)
    return seen


def test_runtime_threads_reach_the_linear_classifier(liblinear_jobs):
    train = examples(60, 0, "t")
    get_classifier("linear-ngrams", Runtime(threads=3)).fit(train)
    get_classifier("linear-ngrams").fit(train)  # default: the process's, else 1
    assert liblinear_jobs == [3, Runtime().threads_or(1)]


def test_runtime_threads_reach_the_stack_and_an_old_saved_threads_is_dropped(tmp_path):
    clf = get_classifier("subjects-stack", Runtime(threads=3), text_recipe="linear-ngrams",
                         rounds=20)
    clf.bind(tiny_vocab())
    clf.fit(examples(120, 0, "t"), examples(60, 1, "d"))
    assert clf.stacker_.threads == 3 and clf.text_.runtime is clf.runtime
    clf.save(tmp_path / "m")
    for config in (tmp_path / "m" / "config.json", tmp_path / "m" / "text" / "config.json"):
        saved = json.loads(config.read_text("utf-8"))
        assert "threads" not in saved["params"]
        # as a model saved before threads became the runtime's
        saved["params"]["threads"] = 5
        config.write_text(json.dumps(saved), "utf-8")
    loaded = Classifier.load(tmp_path / "m", runtime=Runtime(threads=2))
    assert "threads" not in loaded.params and "threads" not in loaded.text_.params
    assert loaded.stacker_.threads == 2 and loaded.text_.runtime is loaded.runtime
    loaded.bind(tiny_vocab())
    new = examples(30, 7, "n")
    np.testing.assert_array_equal(loaded.predict_proba(new), clf.predict_proba(new))
    # an old --param threads=N is accepted as before and left to the runtime
    assert get_classifier("linear-ngrams", threads=4).params == \
        get_classifier("linear-ngrams").params


def write_records(path: Path, exs: list[Example]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for ex in exs:
            fh.write(json.dumps({"text": ex.text, "labels": ex.labels}) + "\n")
    return path


@pytest.fixture
def pins(monkeypatch) -> list[int]:
    """The thread counts the process's libraries were pinned to (recorded, not done:
    pinning would hold for the rest of the test session)."""
    seen: list[int] = []
    monkeypatch.setattr(runtime_module, "set_threads", seen.append)
    return seen


def test_classify_train_threads_reach_the_classifier(tmp_path, pins, liblinear_jobs):
    train = write_records(tmp_path / "train.jsonl", examples(60, 0, "t"))
    res = runner.invoke(app, ["classify", "train", str(tmp_path / "m"), "--train", str(train),
                              "--recipe", "linear-ngrams", "--threads", "3"])
    assert res.exit_code == 0, res.output
    assert pins == [3] and liblinear_jobs == [3]
