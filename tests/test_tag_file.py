"""`tagalign.workflows.tag_file`: docs/python-api.md's "Tagging a file" runs as written, the
function writes what `tagalign suggest` writes (the command calls it), refuses the option
combinations the command refuses, and keeps and resumes a run that stopped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.errors import InputError, MissingFileError, NotTrainedError
from tagalign.project import Project
from tagalign.suggest import SuggestRequest
from tagalign.workflows import (
    TagFileOptions,
    TagFileProgress,
    TaggedFile,
    TaggingStopped,
    tag_file,
)
from test_workflows import section_code
from tiny_models import tiny_records, tiny_vocab


def write(path: Path, recs) -> None:
    """Records as JSONL (gzip when the name ends in .gz)."""
    text = "".join(json.dumps(r.to_json()) + "\n" for r in recs)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_example_runs_as_written(tiny_hybrid, tmp_path, monkeypatch, capsys):
    (tmp_path / "my-hybrid").symlink_to(tiny_hybrid)  # read only: the example writes beside it
    write(tmp_path / "new-titles.jsonl.gz", tiny_records(30, seed=9))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(section_code("Tagging a file"), "python-api.md", "exec"), scope)  # noqa: S102
    done, again = scope["done"], scope["again"]
    assert isinstance(done, TaggedFile) and done.counts.tagged == 30
    released, review = _ids(tmp_path / "suggested.jsonl"), _ids(done.review)
    assert done.review == Path("suggested.review.jsonl")  # beside the output
    assert (len(released), len(review)) == (done.counts.released, done.counts.review)
    assert sorted(released + review) == sorted(r.id for r in tiny_records(30, seed=9))
    assert (again.counts.already, again.counts.tagged) == (30, 0)
    out = capsys.readouterr().out
    assert "30 records read: 30 tagged" in out and "30 already done" in out
    assert "refused: MARC output (--format marc/marcxml, --merge, --agency) works" in out


def test_the_command_writes_what_the_function_writes(tiny_hybrid, tmp_path):
    src = tmp_path / "in.jsonl"
    write(src, tiny_records(25, seed=2))
    request = SuggestRequest(limit=7, exclude=frozenset({"4046076-9"}))
    ours = tag_file(Project.load(tiny_hybrid), src, tmp_path / "lib.jsonl", request,
                    TagFileOptions(jobs=1, batch_size=10))
    (tmp_path / "ex.txt").write_text("4046076-9\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["suggest", str(tiny_hybrid), "-i", str(src), "-o",
                                   str(tmp_path / "cli.jsonl"), "--limit", "7", "--exclude",
                                   str(tmp_path / "ex.txt"), "--jobs", "1",
                                   "--batch-size", "10"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cli.jsonl").read_bytes() == (tmp_path / "lib.jsonl").read_bytes()
    assert ours.summary in res.output and ours.output == tmp_path / "lib.jsonl"
    assert "4046076-9" not in ours.output.read_text(encoding="utf-8")


@pytest.mark.parametrize(("options", "message"), [
    ({"engine": "spark"}, "--engine takes local or ray"),
    ({"format": "csv"}, "--format takes jsonl, parquet, marc, marcxml"),
    ({"review": "r.jsonl"}, "--review goes with --release-above"),
    ({"engine": "ray", "release_above": 0.5}, "--release-above works with --engine local"),
    ({"format": "parquet", "merge": True}, "MARC output (--format marc/marcxml, --merge"),
    ({"engine": "ray", "agency": "DE-101"}, "--engine ray writes jsonl or parquet shards"),
])
def test_options_that_do_not_go_together_are_refused(options, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as caught:
        TagFileOptions(**options)
    assert caught.value.exit_code == 1  # as `tagalign suggest` exits for them


def test_the_output_is_checked_against_merge_and_agency(tmp_path):
    src = tmp_path / "in.jsonl"
    write(src, tiny_records(2))
    with pytest.raises(InputError, match="go with MARC output"):
        TagFileOptions(agency="DE-101").output_format(tmp_path / "out.jsonl", src)
    with pytest.raises(InputError, match="--merge needs MARC input"):
        TagFileOptions(merge=True).output_format(tmp_path / "out.xml", src)
    assert TagFileOptions().output_format(tmp_path / "out.mrc", src) == "marc"
    assert TagFileOptions(format="marcxml").output_format(tmp_path / "o", src) == "marcxml"


def test_missing_files_and_untrained_projects_are_refused_before_loading(tmp_path):
    src = tmp_path / "in.jsonl"
    write(src, tiny_records(2))
    with pytest.raises(MissingFileError, match="records not found"):
        tag_file(tmp_path / "no-project", tmp_path / "none.jsonl", tmp_path / "o.jsonl")
    with pytest.raises(MissingFileError, match="domain model not found"):
        tag_file(tmp_path, src, tmp_path / "o.jsonl",
                 options=TagFileOptions(domains=tmp_path / "no-model"))
    Project.create(tmp_path / "untrained", tiny_vocab(), "lexical")
    with pytest.raises(NotTrainedError):
        tag_file(tmp_path / "untrained", src, tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl.partial").exists()


class Events(TagFileProgress):
    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def start(self, sharded: bool) -> None:
        self.seen.append(("start", sharded))

    def stop(self) -> None:
        self.seen.append(("stop",))

    def resumed(self, already: int, partial: Path) -> None:
        self.seen.append(("resumed", already))

    def batch(self, counts) -> None:
        self.seen.append(("batch", counts.tagged))


def test_a_strict_run_stops_keeps_what_it_finished_and_resumes(tmp_path):
    Project.create(tmp_path / "p", tiny_vocab(), "lexical").train(tiny_records(10))
    src = tmp_path / "in.jsonl"
    lines = [json.dumps(r.to_json()) for r in tiny_records(6, seed=4)]
    src.write_text("\n".join([*lines[:4], "{not json", *lines[4:]]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    events = Events()
    strict = TagFileOptions(strict=True, batch_size=2, jobs=1)
    with pytest.raises(TaggingStopped, match=r"\(--strict stops here\); 4 finished records "
                       "are kept in") as caught:
        tag_file(tmp_path / "p", src, out, options=strict, progress=events)
    stopped = caught.value.result
    assert (stopped.kept, stopped.skipped) == (4, 0)  # strict: raised, not skipped
    assert stopped.partial == tmp_path / "out.jsonl.partial"
    assert _ids(stopped.partial) == ["r0", "r1", "r2", "r3"] and not out.exists()
    assert events.seen == [("start", False), ("batch", 2), ("batch", 4), ("stop",)]

    events = Events()
    done = tag_file(tmp_path / "p", src, out, options=TagFileOptions(resume=True, jobs=1),
                    progress=events)
    assert (done.counts.already, done.counts.tagged, done.skipped) == (4, 2, 1)
    assert _ids(out) == [f"r{i}" for i in range(6)] and not stopped.partial.exists()
    assert events.seen[0] == ("resumed", 4)


def test_a_sharded_run_writes_a_folder_of_shards(tiny_hybrid, tmp_path):
    """``format="parquet"`` on the local engine: the shards are tagged in this process from
    the project's folder, and a second run finds them done."""
    import pyarrow.parquet as pq

    src = tmp_path / "in.jsonl"
    write(src, tiny_records(12, seed=6))
    events = Events()
    options = TagFileOptions(format="parquet", shard_size=5)
    done = tag_file(tiny_hybrid, src, tmp_path / "out", SuggestRequest(limit=3), options,
                    progress=events)
    assert done.batch is not None and done.format == "parquet"
    assert (done.batch.records_out, done.batch.shards_run, done.batch.errors) == (12, 3, 0)
    rows = [row for part in sorted(done.output.glob("part-*.parquet"))
            for row in pq.read_table(part).to_pylist()]
    assert sorted(r["id"] for r in rows) == sorted(r.id for r in tiny_records(12, seed=6))
    assert events.seen == [("start", True), ("stop",)]
    again = tag_file(tiny_hybrid, src, tmp_path / "out", SuggestRequest(limit=3), options)
    assert again.batch is not None and again.batch.shards_skipped == 3
