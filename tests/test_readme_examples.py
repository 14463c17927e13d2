"""Every `tagalign …` command in the code blocks of README.md and docs/ names a command and
options that exist, as written (issue 23: "the README's examples run as written").

Each line is parsed by the real CLI with ``--help`` appended: click reads every option
first (an unknown command or option fails there), then ``--help`` ends the run before
anything is loaded, so the check costs milliseconds a line. Running the examples
themselves needs the shared data and minutes of training; tests/test_cli_*.py run the
cheap ones on tiny data.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagalign.cli import app

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def command_lines() -> list[tuple[str, str]]:
    """(where, line) of every line starting with ``tagalign `` in a bash/sh/no-language
    fence, continuation lines joined and trailing comments dropped."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) not in ("", "bash", "sh", "console", "shell"):
                continue
            body = match.group(2).replace("\\\n", " ")
            for line in body.splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("tagalign "):
                    out.append((f"{path.relative_to(ROOT)}", line))
    return out


def argv(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    for stop in ("|", ">", ">>", "&&", ";", "2>"):  # the tagalign part of a pipeline
        if stop in words:
            words = words[:words.index(stop)]
    return words[1:]


LINES = command_lines()


def test_readme_and_docs_have_examples() -> None:
    assert sum(where == "README.md" for where, _ in LINES) >= 15
    assert len(LINES) >= 40


@pytest.mark.parametrize(("where", "line"), LINES, ids=[f"{w}:{i}" for i, (w, _) in
                                                        enumerate(LINES)])
def test_example_parses_as_written(where: str, line: str) -> None:
    result = CliRunner().invoke(app, [*argv(line), "--help"])
    assert result.exit_code == 0, f"{where}: {line}\n{result.output}"
    assert "Usage:" in result.output


def block_after(heading: str) -> list[str]:
    """The ``tagalign`` lines of the first code block after ``heading`` in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = FENCE.search(text, text.index(heading)).group(2)
    return [line.split("   #")[0].strip() for line in body.splitlines()
            if line.startswith("tagalign ")]


def test_readme_classify_example_runs_as_written(tmp_path, monkeypatch) -> None:
    """The README's domain example, verbatim, on tiny records under its own file names."""
    import json

    from test_classify import domain_examples, write_records

    monkeypatch.chdir(tmp_path)
    write_records(tmp_path / "train.jsonl.gz", domain_examples(160, seed=0))
    write_records(tmp_path / "dev.jsonl.gz", domain_examples(60, seed=1))
    lines = block_after("### Classify records into domains")
    assert [line.split()[:3] for line in lines] == [["tagalign", "classify", "train"],
                                                    ["tagalign", "classify", "predict"],
                                                    ["tagalign", "classify", "eval"]]
    for line in lines:
        result = CliRunner().invoke(app, shlex.split(line)[1:])
        assert result.exit_code == 0, (line, result.output)
    assert (tmp_path / "domains.jsonl").exists()
    scores = json.loads(result.stdout)
    assert scores["micro_f1"] > 0.5  # the tiny domains are learnable: a real classifier ran
