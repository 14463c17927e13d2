"""The parts one command needs are extras (pyproject.toml): without one, that command fails
with exit status 1 and names the extra, before any work; the library functions raise
`MissingExtraError` too. A missing package is simulated by ``sys.modules[name] = None``,
which makes ``import name`` raise ImportError (and ``find_spec`` find nothing)."""

from __future__ import annotations

import importlib
import pickle
import sys

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.errors import MissingExtraError, TagalignError

runner = CliRunner()


def missing(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_missing_extra_error_says_what_to_install():
    exc = MissingExtraError("tagalign hyperopt", "optuna", "tune")
    assert str(exc) == "tagalign hyperopt needs optuna: pip install 'tagalign[tune]'"
    assert isinstance(exc, TagalignError) and isinstance(exc, ImportError)
    assert exc.exit_code == 1 and exc.name == "optuna"
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc) and again.extra == "tune"


def test_check_finds_without_importing(monkeypatch):
    MissingExtraError.check("json", "x", "y")  # installed: nothing happens
    with pytest.raises(MissingExtraError, match=r"x needs nope: pip install 'tagalign\[y\]'"):
        MissingExtraError.check("nope.sub", "x", "y")
    missing(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError, match="needs matplotlib"):
        MissingExtraError.check("matplotlib", "x", "plot")


def test_hyperopt_without_optuna(monkeypatch, tmp_path):
    missing(monkeypatch, "optuna")
    monkeypatch.delitem(sys.modules, "tagalign.evaluate.hyperopt", raising=False)
    with pytest.raises(MissingExtraError, match=r"pip install 'tagalign\[tune\]'"):
        importlib.import_module("tagalign.evaluate.hyperopt")
    # the project is not even looked at: the message comes first
    res = runner.invoke(app, ["hyperopt", str(tmp_path / "nowhere"), "--input",
                              str(tmp_path / "dev.jsonl")])
    assert res.exit_code == 1
    assert "tagalign hyperopt needs optuna: pip install 'tagalign[tune]'" in res.stderr
    assert "Traceback" not in res.output


def test_optimize_plot_without_matplotlib(monkeypatch, tmp_path):
    missing(monkeypatch, "matplotlib")
    res = runner.invoke(app, ["optimize", str(tmp_path / "nowhere"), "--input",
                              str(tmp_path / "dev.jsonl"), "--plot", str(tmp_path / "p.png")])
    assert res.exit_code == 1
    assert "tagalign optimize --plot needs matplotlib: pip install 'tagalign[plot]'" in res.stderr
    assert not (tmp_path / "p.png").exists()


def test_eval_plot_without_matplotlib(monkeypatch, tmp_path):
    gold, pred = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    gold.write_text('{"id": "r1", "title": "x", "subjects": ["a"]}\n')
    pred.write_text('{"id": "r1", "subjects": [{"id": "a", "score": 0.5}], '
                    '"quality": {"recall": 0.5}}\n')
    missing(monkeypatch, "matplotlib")
    res = runner.invoke(app, ["eval", str(gold), str(pred), "--quality", "--plot",
                              str(tmp_path / "q.png")])
    assert res.exit_code == 1
    assert "tagalign eval --plot needs matplotlib: pip install 'tagalign[plot]'" in res.stderr


def test_plot_functions_without_matplotlib(monkeypatch, tmp_path):
    from tagalign.evaluate.optimize import plot_pareto
    from tagalign.evaluate.quality import plot_quality

    missing(monkeypatch, "matplotlib", "matplotlib.pyplot")
    with pytest.raises(MissingExtraError, match=r"tagalign\[plot\]"):
        plot_pareto(None, tmp_path / "p.png")  # type: ignore[arg-type]
    with pytest.raises(MissingExtraError, match=r"tagalign\[plot\]"):
        plot_quality({}, tmp_path / "q.png")


def test_pairs_without_krippendorff(monkeypatch, tmp_path):
    from tagalign.pairs import krippendorff_alpha

    missing(monkeypatch, "krippendorff")
    with pytest.raises(MissingExtraError, match=r"pip install 'tagalign\[pairs\]'"):
        krippendorff_alpha([1, 2, 3], [1, 2, 4])
    (tmp_path / "train").mkdir()
    (tmp_path / "dev").mkdir()
    res = runner.invoke(app, ["pairs", "train", str(tmp_path / "model"), "--train",
                              str(tmp_path / "train"), "--dev", str(tmp_path / "dev")])
    assert res.exit_code == 1
    assert "tagalign pairs train needs krippendorff: pip install 'tagalign[pairs]'" in res.stderr
    assert not (tmp_path / "model").exists()
    res = runner.invoke(app, ["pairs", "eval", str(tmp_path / "dev"), str(tmp_path / "train")])
    assert res.exit_code == 1
    assert "tagalign pairs eval needs krippendorff: pip install 'tagalign[pairs]'" in res.stderr


def test_ray_engine_without_ray(monkeypatch):
    from tagalign.batch import get_engine

    missing(monkeypatch, "ray", "ray.data")
    with pytest.raises(MissingExtraError) as info:
        get_engine("ray")
    assert str(info.value) == "--engine ray needs Ray: pip install 'tagalign[ray]'"


def test_no_extra_is_imported_by_the_rest():
    """The CLI, the server, batch tagging and the modules that use an extra only inside a
    function import none of the extras (a fresh interpreter: nothing cached)."""
    import subprocess

    code = ("import sys\n"
            "import tagalign.cli, tagalign.project, tagalign.serve.app, tagalign.batch\n"
            "import tagalign.pairs, tagalign.evaluate.optimize, tagalign.evaluate.quality\n"
            "print([m for m in ('optuna', 'matplotlib', 'krippendorff', 'ray')"
            " if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == "[]"
