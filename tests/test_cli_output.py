"""What a new user sees (issue 23): results on stdout, progress and errors on stderr; the
vocabulary search ranks exact matches first; small wording fixes of the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.project import Project
from tagalign.vocab import Subject, Vocabulary
from test_pairs import write_comedi
from tiny_models import tiny_records, tiny_vocab

runner = CliRunner()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


@pytest.fixture(scope="module")
def lexical(tmp_path_factory) -> Path:
    """A lexical project on the tiny vocabulary (trains instantly)."""
    path = tmp_path_factory.mktemp("lex") / "proj"
    Project.create(path, tiny_vocab(), "lexical").train(tiny_records(40))
    return path


# -- item 4: results on stdout --------------------------------------------------------
def test_records_stats_table_goes_to_stdout(tmp_path):
    src = write_jsonl(tmp_path / "r.jsonl", [r.to_json() for r in tiny_records(30)])
    res = runner.invoke(app, ["records", "stats", str(src)])
    assert res.exit_code == 0, res.stderr
    assert "records" in res.stdout and "30" in res.stdout
    assert "by language" in res.stdout and "by language" not in res.stderr


def test_vocab_show_table_goes_to_stdout(tmp_path):
    tiny_vocab().save(tmp_path / "v")
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "4015065-3"])
    assert res.exit_code == 0, res.stderr
    assert "4015065-3" in res.stdout and "Epos" in res.stdout
    assert "Epos" not in res.stderr


def test_classify_eval_tables_go_to_stdout(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", [
        {"id": "a", "title": "x", "domains": ["lit"]},
        {"id": "b", "title": "y", "domains": ["inf", "lit"]}])
    pred = write_jsonl(tmp_path / "pred.jsonl", [
        {"id": "a", "labels": [{"label": "lit", "score": 0.9}]},
        {"id": "b", "labels": [{"label": "inf", "score": 0.8}]}])
    res = runner.invoke(app, ["classify", "eval", str(gold), str(pred)])
    assert res.exit_code == 0, res.stderr
    assert "micro-F1" in res.stdout and "support" in res.stdout
    assert "micro-F1" not in res.stderr


def test_pairs_eval_report_on_stdout_with_a_4x4_confusion_grid(tmp_path):
    pairs = write_comedi(tmp_path / "gold" / "english", n_uses=6)
    (tmp_path / "pred").mkdir()
    (tmp_path / "pred" / "english.tsv").write_text(
        "identifier1\tidentifier2\tprediction\n"
        + "".join(f"{a}\t{b}\t{int(label)}\n" for a, b, label in pairs), "utf-8")
    res = runner.invoke(app, ["pairs", "eval", str(tmp_path / "gold"), str(tmp_path / "pred")])
    assert res.exit_code == 0, res.stderr
    assert "mean alpha 1.0000" in res.stdout and "confusion" not in res.stderr
    grid = res.stdout[res.stdout.index("english confusion"):].splitlines()
    rows = [line.strip("│┃ ").split() for line in grid
            if line.strip("│┃ ")[:1] in ("1", "2", "3", "4")]
    counts = {label: sum(1 for *_, lab in pairs if lab == label) for label in (1, 2, 3, 4)}
    assert len(rows) == 4  # a 4×4 grid, one row per gold label: the diagonal holds all
    for k, row in enumerate(rows, 1):
        cells = [int(c) for c in row if c.isdigit()][1:]
        assert cells == [counts[k] if j == k else 0 for j in (1, 2, 3, 4)]


def test_suggest_title_table_goes_to_stdout(lexical):
    res = runner.invoke(app, ["suggest", str(lexical), "--title", "Epos und Heldenlied"])
    assert res.exit_code == 0, res.stderr
    assert "4015065-3" in res.stdout and "4015065-3" not in res.stderr


# -- item 6: search ranks exact, prefix, word-start, substring -------------------------
def search_vocab() -> Vocabulary:
    rows = [("1", "Heldenepos", "Heroic epic"), ("2", "Tierepos", "Animal epic"),
            ("3", "Epos (Literatur)", "Epic poetry"), ("4", "Deutsches Epos", "German epic"),
            ("5", "Epos", "Epic"), ("6", "Pilze", "Fungi")]
    return Vocabulary(Subject(i, {"de": de, "en": en}) for i, de, en in rows)


def test_vocabulary_search_ranks_exact_then_prefix_then_word_then_substring():
    vocab = search_vocab()
    assert [s.id for s in vocab.search("Epos")] == ["5", "3", "4", "1", "2"]
    assert [s.id for s in vocab.search("epic", limit=2)] == ["5", "3"]  # other language
    assert [s.id for s in vocab.search("EPOS", limit=-1)] == ["5", "3", "4", "1", "2"]
    assert vocab.search("zzz") == [] and vocab.search("  ") == []


def test_vocab_show_search_puts_the_exact_match_first_and_n_minus_one_keeps_all(tmp_path):
    search_vocab().save(tmp_path / "v")
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "--search", "Epos",
                              "-n", "-1"])
    assert res.exit_code == 0, res.stderr
    ids = [line.strip("│┃ ").split()[0] for line in res.stdout.splitlines()
           if line.strip("│┃ ")[:1].isdigit()]
    assert ids == ["5", "3", "4", "1", "2"]
    assert "5 subjects shown" in res.stderr


# -- item 10: wording ------------------------------------------------------------------
def test_engine_help_shows_the_ray_extra():
    for command in ("encode", "suggest"):
        res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "tagalign[ray]" in res.stdout, command


def test_usage_errors_read_error_in_lower_case():
    res = runner.invoke(app, ["suggest", "x", "--bogus"])
    assert res.exit_code == 2
    assert "─ error ─" in res.stderr and "Error" not in res.stderr


def test_vocab_load_of_an_unknown_format_names_the_option(tmp_path):
    (tmp_path / "empty").write_text("", "utf-8")
    res = runner.invoke(app, ["vocab", "load", str(tmp_path / "empty"), "--out",
                              str(tmp_path / "o")])
    assert res.exit_code == 1
    assert res.stderr.startswith("error: ") and "--format" in res.stderr
    assert "format=" not in res.stderr


def _command_lists(path: list[str]) -> dict[str, list[str]]:
    """Each group's command list as rendered at 100 columns: group path → its rows (the
    lines inside the Commands panel), for the root and every sub-app below it."""
    import typer

    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "─ Commands ─" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    found = {" ".join(path): [line.strip("│").rstrip() for line in lines[start + 1:end]]}
    group = typer.main.get_command(app)
    for name in path:
        group = group.commands[name]  # type: ignore[attr-defined]
    for name, sub in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(sub, "commands"):
            found |= _command_lists([*path, name])
    return found


def test_help_lists_one_line_per_command_and_keeps_the_long_text_for_its_own_help():
    lists = _command_lists([])
    assert {"", "vocab", "feedback", "classify", "pairs", "records", "tokens"} <= set(lists)
    for group, rows in lists.items():
        assert rows, group
        wrapped = [row for row in rows if row[1:2] == " "]  # a row's second line: no name
        assert not wrapped, (group or "tagalign", wrapped)
    names = {row.split()[0] for row in lists[""]}
    assert {"download", "eval", "upload", "serve", "pairs", "tokens", "classify"} <= names
    res = runner.invoke(app, ["download", "--help"], env={"COLUMNS": "100"})
    assert "pickles, damaged archives" in res.stdout  # the long text stays with the command
    res = runner.invoke(app, ["pairs", "train", "--help"], env={"COLUMNS": "100"})
    assert "lemma-grouped K-fold" in res.stdout
