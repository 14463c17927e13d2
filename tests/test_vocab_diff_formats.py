"""`tagalign vocab diff OLD NEW… --format X`: a forced format applies to every file (given
once) or to each file in turn (given once per file, OLD first), as `vocab load`'s applies
to its file; a saved folder is read as one whatever is forced; files whose names tell
their format need none."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from marc_authority import authority, write_xml
from tagalign.cli import app
from test_vocab_changes import old_vocabulary, week_one

runner = CliRunner()


def counts(*args: str) -> dict[str, int]:
    res = runner.invoke(app, ["vocab", "diff", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["counts"]


def dump(path: Path) -> Path:
    """``old_vocabulary`` as a GND authority dump (MARC-XML) at ``path``."""
    return write_xml(path, [authority(s.id, s.label()) for s in old_vocabulary()])


def test_a_format_given_once_applies_to_every_file(tmp_path):
    expected = counts(str(old_vocabulary().save(tmp_path / "gnd")),
                      str(write_xml(tmp_path / "week.mrc.xml", week_one())))
    assert expected["added"] == 1 and expected["redirected"] == 1
    # names that tell no format: both files read as forced
    old, week = dump(tmp_path / "old.data"), write_xml(tmp_path / "week.data", week_one())
    assert counts(str(old), str(week), "--format", "gnd-marc") == expected
    # a saved folder stays one: the forced format is NEW's
    assert counts(str(tmp_path / "gnd"), str(week), "-f", "gnd-marc") == expected
    refused = runner.invoke(app, ["vocab", "diff", str(old), str(week)])
    assert refused.exit_code != 0 and "--format" in refused.output


def test_a_format_given_per_file_applies_to_each_in_turn(tmp_path):
    old = tmp_path / "old.data"
    old.write_text("gnd_id\tlabel_de\n" + "".join(f"{s.id}\t{s.label()}\n"
                                                  for s in old_vocabulary()), encoding="utf-8")
    week, again = (write_xml(tmp_path / f"{n}.data", week_one()) for n in ("w1", "w2"))
    got = counts(str(old), str(week), str(again),
                 "--format", "gnd-tsv", "--format", "gnd-marc", "--format", "gnd-marc")
    assert got == counts(str(old_vocabulary().save(tmp_path / "gnd")),
                         str(write_xml(tmp_path / "week.mrc.xml", week_one())))
    # two whole vocabularies in one format that says nothing of changes: compared whole
    new = tmp_path / "new.data"
    new.write_text("gnd_id\tlabel_de\n4000001-1\tBank\n4000002-2\tHolzschutz\n"
                   "4000009-9\tNeu\n", encoding="utf-8")
    whole = counts(str(old), str(new), "--format", "gnd-tsv")
    assert (whole["added"], whole["relabelled"], whole["deleted"]) == (1, 1, 6)
    wrong = runner.invoke(app, ["vocab", "diff", str(old), str(week), "-f", "gnd-tsv",
                                "-f", "gnd-marc", "-f", "gnd-marc"])
    assert wrong.exit_code == 1
    assert wrong.output.strip() == ("error: --format given 3 times for 2 files: give it "
                                    "once (every file) or once per file, in their order")
