"""The built wheel is a working install by itself: scripts/wheel-check.sh builds it (sdist,
then wheel), installs it into a fresh venv with requirements.lock as constraints (no CUDA
torch, every package at its locked version), and that venv's own `tagalign suggest` on a
project saved by this tree writes the same predictions as this tree does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_suggests(tmp_path):
    from tiny_models import TOPICS, tiny_records, train_tiny_hybrid

    work = tmp_path / "wheel"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel, not src/
    env["PYTHON"] = sys.executable
    env["TAGALIGN_CACHE"] = str(tmp_path / "cache")
    try:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "wheel-check.sh"), str(work)],
                              env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "no CUDA" in done.stdout

        project = train_tiny_hybrid(tmp_path / "project")
        records = tmp_path / "in.jsonl"
        records.write_text("".join(
            json.dumps({"id": r.id, "title": r.title, "abstract": r.abstract,
                        "language": r.language}) + "\n" for r in tiny_records(6, seed=7)))

        def suggest(tagalign: Path, out: Path, run_env: dict[str, str]) -> list[dict]:
            res = subprocess.run([str(tagalign), "suggest", str(project), "--input",
                                  str(records), "--output", str(out), "--limit", "3"],
                                 env=run_env, cwd=tmp_path, capture_output=True, text=True,
                                 timeout=300)
            assert res.returncode == 0, res.stderr
            return [json.loads(line) for line in out.read_text().splitlines()]

        wheel_env = {**env, "PATH": f"{work / 'venv' / 'bin'}{os.pathsep}{env['PATH']}"}
        from_wheel = suggest(work / "venv" / "bin" / "tagalign", tmp_path / "wheel.jsonl",
                             wheel_env)
        from_tree = suggest(Path(sys.executable).parent / "tagalign", tmp_path / "tree.jsonl",
                            dict(os.environ, TAGALIGN_CACHE=env["TAGALIGN_CACHE"]))
        assert [p["id"] for p in from_wheel] == [f"r{i}" for i in range(6)]
        assert all(s["id"] in TOPICS for p in from_wheel for s in p["subjects"])
        assert all(len(p["subjects"]) == 3 for p in from_wheel)
        assert from_wheel == from_tree
    finally:
        shutil.rmtree(work / "venv", ignore_errors=True)  # 2 GB: not kept for pytest's
        # last three runs
