"""The DNB's splits as the GND names their kinds (GND change coding, field 010/008@
"Änderungscodierung": "s" Aufspaltung ohne Umlenkung, "p" Aufspaltung mit Umlenkung, "g"
Aufspaltung mit Teilumlenkung; the STA rule on splits: the target record is linked): each
comes with leader/05 ``c`` and a 682 naming its kind and its target, and each reads as a
split, never as a redirect announced though two of them say "Umlenkung"."""

from __future__ import annotations

import pytest

from marc_authority import authority, field_682, status, with_682, write_binary, write_xml
from tagalign.vocab.changes import Announced, Split, read_changes, summarize
from test_vocab_changes import old_vocabulary

KINDS = ["Aufspaltung ohne Umlenkung", "Aufspaltung mit Umlenkung",
         "Aufspaltung mit Teilumlenkung"]


@pytest.mark.parametrize("text", KINDS)
@pytest.mark.parametrize("write", [write_xml, write_binary], ids=["xml", "binary"])
def test_each_kind_of_split_reads_as_a_split(tmp_path, text, write):
    path = write(tmp_path / "week.mrc", [
        with_682(authority("4000007-7", "Holzbau", leader=status("c")),
                 field_682(text, ("4000001-1", "Bank <Möbel>"))),
        with_682(authority("4000003-3", "Möbel", leader=status("c")),
                 field_682("Umlenkung", ("4000001-1", "Bank <Möbel>")))])
    changes = read_changes([path])
    assert changes.get("4000007-7") == Split(id="4000007-7", targets=("4000001-1",),
                                             note=text)
    assert isinstance(changes.get("4000003-3"), Announced)  # a redirect still announced
    counts = summarize(changes, old_vocabulary()).counts()
    assert (counts["split"], counts["announced"], counts["redirected"]) == (1, 1, 0)
