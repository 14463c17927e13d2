"""The skip report of `skip_report` (loaded by conftest.py): skips counted by reason at the
end of the run, and with CI=true a skipped test fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SAMPLE = '''
import pytest

@pytest.fixture
def data():
    pytest.skip("shared data not found")

def test_a(data): pass
def test_b(data): pass

@pytest.mark.skipif(True, reason="chromium missing")
def test_c(): pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_d(): raise AssertionError

def test_e(): pass
'''


def run(folder: Path, ci: str | None, *files: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the sample needs no plugin: seconds saved
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "skip_report", "--rootdir", str(folder), *files],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_skips_are_counted_by_reason_and_fail_only_in_ci(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE, "utf-8")
    (tmp_path / "test_clean.py").write_text("def test_ok(): pass\n", "utf-8")
    local = run(tmp_path, None, "test_sample.py")
    assert local.returncode == 0, local.stdout + local.stderr
    tail = local.stdout[local.stdout.index("3 tests skipped"):]
    assert "    2 x shared data not found\n" in tail
    assert "    1 x chromium missing\n" in tail
    assert "known bug" not in tail  # an xfail is not a skip
    assert "1 passed, 3 skipped, 1 xfailed" in tail

    ci = run(tmp_path, "true", "test_sample.py")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "CI=true: FAILED because 3 tests skipped" in ci.stdout

    clean = run(tmp_path, "true", "test_clean.py")  # CI with nothing skipped passes
    assert clean.returncode == 0 and "skipped" not in clean.stdout, clean.stdout
