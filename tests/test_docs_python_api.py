"""docs/python-api.md's Python examples run as written, on a tiny trained hybrid."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def test_python_api_example_runs_as_written(tiny_hybrids, tmp_path, monkeypatch, capsys):
    text = (ROOT / "docs/python-api.md").read_text(encoding="utf-8")
    # its "Suggesting" section (the training sections run in tests/test_workflows.py)
    blocks = PYTHON.findall(text.split("\n## Suggesting\n", 1)[1].split("\n## ", 1)[0])
    assert blocks
    (tmp_path / "gnd-hybrid").symlink_to(tiny_hybrids[0])  # the folder the example loads
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), scope)  # noqa: S102 - our docs
    answer = scope["answers"][0]
    assert 0 < len(answer.suggestions) <= 5 and answer.quality is not None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[0] == answer.suggestions[0].id
    assert lines[-1].startswith("estimated quality: Quality(recall=")
