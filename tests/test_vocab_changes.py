"""Change files read into a ChangeSet (`tagalign.vocab.changes`): the GND-Änderungsdienst's
records of each kind built with pymarc from the formats' documentation (MARC 21 authority
leader/05, field 682 as the GND-Erfassungsleitfaden and the Alma-D-A-CH documentation
describe it, the DNB's page on the Änderungsdienst), written as MARC 21 and MARC-XML,
gzipped or not, and read back; the order of files; reading a file twice; malformed files;
SKOS deprecations; a whole newer dump; `vocab diff`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymarc import Indicators, Record
from typer.testing import CliRunner

from marc_authority import (
    authority,
    field_682,
    shortened,
    status,
    with_682,
    write_binary,
    write_xml,
)
from tagalign.cli import app
from tagalign.io import InputReport
from tagalign.vocab import Subject, Vocabulary, load_vocabulary
from tagalign.vocab.changes import (
    Announced,
    BadChangesError,
    ChangeSet,
    Deleted,
    Heading,
    Redirected,
    Split,
    diff_vocabularies,
    read_changes,
    read_whole,
    summarize,
)

runner = CliRunner()
BLANK = Indicators(" ", " ")


def week_one() -> list[Record]:
    """One of each kind: new (n), corrected (c), a redirect announced (c + 682 $i Umlenkung
    with its target), a redirect (x + 682 $0 target, $a its name), a deletion (d + 682 $i
    Loeschung), a split (c + 682 naming the split), and a person (another entity type)."""
    return [
        authority("1300000001", "Wärmepumpenheizung", alts=["Wärmepumpe <Heizung>"],
                  leader=status("n")),
        authority("4000002-2", "Holzschutzmittel", alts=["Holzkonservierung"],
                  leader=status("c")),
        with_682(authority("4000003-3", "Möbel", leader=status("c")),
                 field_682("Umlenkung", ("4000001-1", "Bank <Möbel>"))),
        shortened("4000004-4", "x", field_682(None, ("4000005-5", "Geschichte"))),
        shortened("4000006-6", "d", field_682("Loeschung")),
        with_682(authority("4000007-7", "Holzbau", leader=status("c")),
                 field_682("Aufspaltung ohne Umlenkung")),
        authority("118621890", ("Tiemann, Walter", None), types=("p", "piz"),
                  heading_tag="100", leader=status("n")),
    ]


EXPECTED = {
    "1300000001": Heading, "4000002-2": Heading, "4000003-3": Announced,
    "4000004-4": Redirected, "4000006-6": Deleted, "4000007-7": Split,
}


def old_vocabulary() -> Vocabulary:
    return Vocabulary([Subject(sid, {"de": label}, alts) for sid, label, alts in [
        ("4000001-1", "Bank <Möbel>", {}),
        ("4000002-2", "Holzschutz", {"de": ["Holzkonservierung"]}),
        ("4000003-3", "Möbel", {}), ("4000004-4", "Pilze", {}), ("4000005-5", "Geschichte", {}),
        ("4000006-6", "Gelöscht", {}), ("4000007-7", "Holzbau", {}),
        ("4000008-8", "Stuhl", {})]])


WRITERS = {"xml": (write_xml, ".mrc.xml"), "binary": (write_binary, ".mrc")}


@pytest.fixture(params=[(w, gz) for w in WRITERS for gz in (False, True)],
                ids=lambda p: f"{p[0]}{'-gz' if p[1] else ''}")
def week_file(request, tmp_path) -> Path:
    writer, suffix = WRITERS[request.param[0]]
    gz = request.param[1]
    return writer(tmp_path / f"GND-aenderungen{suffix}{'.gz' if gz else ''}", week_one(), gz)


def test_each_kind_of_record_reads_as_its_change(week_file):
    changes = read_changes([week_file])
    assert {c.id: type(c) for c in changes} == EXPECTED  # the person is another entity type
    new = changes.get("1300000001")
    assert isinstance(new, Heading) and new.subject.labels == {"de": "Wärmepumpenheizung"}
    assert new.subject.alt_labels == {"de": ["Wärmepumpe <Heizung>"]}
    announced = changes.get("4000003-3")
    assert announced == Announced(id="4000003-3", action="redirect", target="4000001-1",
                                  target_label="Bank <Möbel>",
                                  subject=announced.subject)
    assert announced.subject is not None and announced.subject.label() == "Möbel"
    assert changes.get("4000004-4") == Redirected(id="4000004-4", target="4000005-5",
                                                   target_label="Geschichte")
    assert changes.get("4000006-6") == Deleted(id="4000006-6", note="Loeschung")
    assert changes.get("4000007-7") == Split(id="4000007-7", note="Aufspaltung ohne Umlenkung")
    assert changes.get("4000004-4").where.startswith(f"{week_file}: record 4")


def test_against_a_vocabulary_each_kind_is_counted(week_file):
    summary = summarize(read_changes([week_file]), old_vocabulary())
    assert summary.counts() == {"added": 1, "relabelled": 1, "unchanged": 0, "redirected": 1,
                                "redirected_outside": 0, "split": 1, "deleted": 1,
                                "announced": 1, "unknown_skipped": 0}
    assert summary.added == ["1300000001"] and summary.relabelled == ["4000002-2"]
    assert summary.redirected == {"4000004-4": "4000005-5"}
    assert summary.labels["4000005-5"] == "Geschichte"


def test_every_entity_type_on_request(tmp_path):
    path = write_xml(tmp_path / "w.mrc.xml", week_one())
    assert "118621890" not in read_changes([path])
    person = read_changes([path], entity_types="all").get("118621890")
    assert isinstance(person, Heading) and person.subject.label() == "Tiemann, Walter"


def test_the_announcement_then_the_redirect_is_a_redirect(tmp_path):
    announce = write_xml(tmp_path / "week1.mrc.xml", [
        with_682(authority("4000003-3", "Möbel", leader=status("c")),
                 field_682("Umlenkung", ("4000001-1", "Bank <Möbel>")))])
    redirect = write_binary(tmp_path / "week2.mrc", [
        shortened("4000003-3", "x", field_682(None, ("4000001-1", "Bank <Möbel>")))])
    assert isinstance(read_changes([announce, redirect]).get("4000003-3"), Redirected)
    # the order given is the order read: the later record wins
    assert isinstance(read_changes([redirect, announce]).get("4000003-3"), Announced)
    summary = summarize(read_changes([announce, redirect]), old_vocabulary())
    assert summary.redirected == {"4000003-3": "4000001-1"} and not summary.announced


def test_reading_a_file_twice_gives_the_same_changes(week_file):
    once = read_changes([week_file])
    assert read_changes([week_file, week_file]) == ChangeSet.of(once, [str(week_file)] * 2)
    assert list(read_changes([week_file, week_file])) == list(once)


def test_a_file_already_applied_changes_nothing(tmp_path):
    # the vocabulary as it is after the week: the new heading and the correction in it
    after = Vocabulary([*(s for s in old_vocabulary() if s.id != "4000002-2"),
                        Subject("4000002-2", {"de": "Holzschutzmittel"},
                                {"de": ["Holzkonservierung"]}),
                        Subject("1300000001", {"de": "Wärmepumpenheizung"},
                                {"de": ["Wärmepumpe <Heizung>"]})])
    path = write_xml(tmp_path / "w.mrc.xml", week_one()[:2])
    summary = summarize(read_changes([path]), after)
    assert summary.empty and summary.unchanged == 2


def test_a_chain_of_redirects_ends_at_the_last_target():
    changes = ChangeSet.of([Redirected(id="A", target="B"), Redirected(id="B", target="C"),
                            Redirected(id="X", target="Y"), Deleted(id="Y"),
                            Redirected(id="P", target="Q"), Redirected(id="Q", target="P")])
    assert changes.redirects() == {"A": "C", "B": "C"}
    assert changes.resolve("X") is None and changes.resolve("P") is None


def test_a_redirect_to_a_heading_outside_the_vocabulary(tmp_path):
    path = write_binary(tmp_path / "w.mrc", [
        shortened("4000008-8", "x", field_682(None, ("118621890", "Tiemann, Walter")))])
    summary = summarize(read_changes([path]), old_vocabulary())
    assert summary.redirected_outside == ["4000008-8"] and not summary.redirected


def test_ids_the_vocabulary_never_had_are_skipped(tmp_path):
    path = write_binary(tmp_path / "w.mrc", [
        shortened("4999999-9", "d", field_682("Loeschung")),
        shortened("4999998-8", "x", field_682(None, ("4000005-5", "Geschichte")))])
    summary = summarize(read_changes([path]), old_vocabulary())
    assert summary.unknown == ["4999999-9", "4999998-8"] and not summary.deleted


# -- malformed files -----------------------------------------------------------------------
def broken_week() -> list[Record]:
    no_target = shortened("4000004-4", "x", field_682("Umlenkung"))
    no_id = authority("4000009-9", "Ohne Nummer", in_024=False, leader=status("n"))
    no_id.remove_fields("035")
    return [week_one()[0], no_target, no_id, week_one()[4]]


@pytest.mark.parametrize("writer", ["xml", "binary"])
def test_a_malformed_file_gives_nothing_and_names_each_record(tmp_path, writer):
    write, suffix = WRITERS[writer]
    path = write(tmp_path / f"bad{suffix}", broken_week())
    with pytest.raises(BadChangesError) as err:
        read_changes([path], option="--skip-bad")
    message = str(err.value)
    assert message.startswith("2 malformed records in the change files, so none was read; "
                              "--skip-bad reads the rest: ")
    assert f"{path}: record 2 (001 940000044): a redirect (leader/05 x) without its " \
           "target's GND id (682 $0 (DE-588)…)" in message
    assert f"{path}: record 3 (001 940000099): no GND id" in message
    report = InputReport(stream=io.StringIO())
    changes = read_changes([path], skip_bad=True, report=report)
    assert [c.id for c in changes] == ["1300000001", "4000006-6"]
    assert report.n_skipped == 2


def test_a_file_cut_short_is_malformed(tmp_path):
    path = write_binary(tmp_path / "w.mrc", week_one())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    with pytest.raises(BadChangesError, match=r"w\.mrc: record 7"):
        read_changes([path])
    assert len(read_changes([path], skip_bad=True, report=InputReport(
        stream=io.StringIO()))) == 6


def test_a_file_that_holds_no_changes_is_refused(tmp_path):
    tsv = tmp_path / "v.tsv"
    tsv.write_text("gnd_id\tlabel_de\n4000001-1\tBank\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a change file"):
        read_changes([tsv])


# -- SKOS ----------------------------------------------------------------------------------
#: a thesaurus release as YSO and STW publish one: the scheme, concepts in it, a deprecated
#: concept replaced by one (a redirect), one replaced by two (a split), one by none
SKOS_RELEASE = """@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
@prefix owl: <http://www.w3.org/2002/07/owl#> .
@prefix dct: <http://purl.org/dc/terms/> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
@prefix yso: <http://www.yso.fi/onto/yso/> .

yso: a skos:ConceptScheme ;
    skos:prefLabel "Yleinen suomalainen ontologia YSO"@fi, "General Finnish ontology YSO"@en .

yso:p1 a skos:Concept ; skos:inScheme yso: ;
    skos:prefLabel "kirjastot"@fi, "libraries"@en ; skos:altLabel "kirjastolaitos"@fi .
yso:p2 a skos:Concept ; skos:inScheme yso: ; skos:prefLabel "arkistot"@fi, "archives"@en .
yso:p3 a skos:Concept ; skos:inScheme yso: ; skos:prefLabel "museot"@fi, "museums"@en .
yso:p10 a skos:Concept ; skos:inScheme yso: ;
    skos:prefLabel "kirjastolaitos"@fi ; owl:deprecated true ; dct:isReplacedBy yso:p1 .
yso:p11 a skos:Concept ; skos:inScheme yso: ;
    skos:prefLabel "muistiorganisaatiot"@fi ; owl:deprecated "true"^^xsd:boolean ;
    dct:isReplacedBy yso:p2, yso:p3 .
yso:p12 a skos:Concept ; skos:inScheme yso: ;
    skos:prefLabel "vanhentunut"@fi ; owl:deprecated true .
"""
YSO = "http://www.yso.fi/onto/yso/"


def test_skos_load_keeps_neither_deprecated_concepts_nor_the_scheme(tmp_path):
    path = tmp_path / "yso.ttl"
    path.write_text(SKOS_RELEASE, encoding="utf-8")
    vocab = load_vocabulary(path)
    assert sorted(vocab.ids) == [f"{YSO}p1", f"{YSO}p2", f"{YSO}p3"]
    assert not vocab.search("YSO") and not vocab.search("vanhentunut")


def test_skos_deprecations_read_as_redirect_split_and_deletion(tmp_path):
    path = tmp_path / "yso.ttl"
    path.write_text(SKOS_RELEASE, encoding="utf-8")
    changes = read_changes([path])
    assert changes.get(f"{YSO}p10") == Redirected(id=f"{YSO}p10", target=f"{YSO}p1",
                                                  target_label="kirjastot")
    assert changes.get(f"{YSO}p11") == Split(id=f"{YSO}p11", targets=(f"{YSO}p2", f"{YSO}p3"),
                                             note="deprecated, replaced by several concepts")
    assert isinstance(changes.get(f"{YSO}p12"), Deleted)
    assert sorted(c.id for c in changes.of_kind(Heading)) == [f"{YSO}p1", f"{YSO}p2",
                                                              f"{YSO}p3"]
    assert YSO not in changes and YSO.rstrip("/") not in changes  # the scheme is no heading
    # the RDF/XML of the same release reads the same
    from rdflib import Graph

    xml = tmp_path / "yso.rdf"
    Graph().parse(data=SKOS_RELEASE, format="turtle").serialize(xml, format="xml")
    assert list(read_changes([xml])) == list(changes)


# -- a whole newer dump --------------------------------------------------------------------
def test_a_newer_vocabulary_compared_whole():
    old = old_vocabulary()
    new = Vocabulary([Subject("4000001-1", {"de": "Bank <Möbel>"}),
                      Subject("4000002-2", {"de": "Holzschutzmittel"}),
                      Subject("1300000001", {"de": "Wärmepumpenheizung"}),
                      *(s for s in old if s.id in ("4000003-3", "4000005-5"))])
    summary = summarize(diff_vocabularies(old, new), old)
    assert summary.added == ["1300000001"]
    # 4000002-2 lost its alternative label too
    assert summary.relabelled == ["4000002-2"]
    assert summary.deleted == ["4000004-4", "4000006-6", "4000007-7", "4000008-8"]
    assert summary.unchanged == 3


def test_a_dump_s_redirects_are_redirects_not_deletions(tmp_path):
    dump = write_xml(tmp_path / "authorities-gnd-sachbegriff_dnbmarc_20240813.mrc.xml.gz", [
        *(authority(s.id, s.label()) for s in old_vocabulary()
          if s.id not in ("4000004-4", "4000006-6")),
        shortened("4000004-4", "x", field_682(None, ("4000005-5", "Geschichte")))], gz=True)
    summary = summarize(read_whole(dump, old_vocabulary()), old_vocabulary())
    assert summary.redirected == {"4000004-4": "4000005-5"}
    assert summary.deleted == ["4000006-6"]
    # the same dump loads as a vocabulary: the shortened record is skipped, not malformed
    report = InputReport(stream=io.StringIO())
    assert len(load_vocabulary(dump, report=report)) == 6 and not report.n_skipped


# -- properties ----------------------------------------------------------------------------
IDS = st.sampled_from(["A", "B", "C", "D"])
SUBJECTS = st.builds(lambda sid, label: Subject(sid, {"de": label}), IDS,
                     st.sampled_from(["x", "y"]))
CHANGES = st.one_of(
    st.builds(lambda s: Heading(id=s.id, subject=s), SUBJECTS),
    st.builds(lambda a, b: Redirected(id=a, target=b), IDS, IDS),
    st.builds(lambda a: Deleted(id=a), IDS),
    st.builds(lambda a: Split(id=a), IDS),
    st.builds(lambda a, act: Announced(id=a, action=act), IDS,
              st.sampled_from(["redirect", "deletion"])))


@settings(max_examples=200, deadline=None)
@given(st.lists(CHANGES, max_size=12))
def test_folding_twice_is_folding_once_and_the_last_record_wins(changes):
    once = ChangeSet.of(changes)
    assert ChangeSet.of(changes + changes) == once
    for sid, change in once.changes.items():
        last = [c for c in changes if c.id == sid][-1]
        assert type(change) is type(last)


@settings(max_examples=200, deadline=None)
@given(st.lists(CHANGES, max_size=12))
def test_resolving_ends_at_a_heading_that_is_not_redirected(changes):
    folded = ChangeSet.of(changes)
    for sid in "ABCD":
        end = folded.resolve(sid)
        assert end is None or not isinstance(folded.get(end), Redirected | Deleted | Split)


GIDS = st.sampled_from(["4000001-1", "4000002-2", "4000003-3", "1300000001"])
RECORDS = st.one_of(
    st.builds(lambda g: ("heading", g, None), GIDS),
    st.builds(lambda g, t: ("redirected", g, t), GIDS, GIDS),
    st.builds(lambda g, t: ("announced", g, t), GIDS, GIDS),
    st.builds(lambda g: ("deleted", g, None), GIDS),
    st.builds(lambda g: ("split", g, None), GIDS))


def build(kind: str, gid: str, target: str | None) -> Record:
    """A record of ``kind`` as `week_one` builds each."""
    if kind == "heading":
        return authority(gid, f"Heading {gid}", leader=status("c"))
    if kind == "redirected":
        return shortened(gid, "x", field_682(None, (target, f"Heading {target}")))
    if kind == "announced":
        return with_682(authority(gid, f"Heading {gid}", leader=status("c")),
                        field_682("Umlenkung", (target, f"Heading {target}")))
    if kind == "deleted":
        return shortened(gid, "d", field_682("Loeschung"))
    return with_682(authority(gid, f"Heading {gid}", leader=status("c")),
                    field_682("Aufspaltung mit Teilumlenkung"))  # a kind the GND names


@settings(max_examples=40, deadline=None)
@given(st.lists(RECORDS, min_size=1, max_size=8), st.sampled_from(sorted(WRITERS)),
       st.booleans())
def test_records_written_and_read_back_are_the_changes_they_say(records, writer, gz):
    import tempfile

    write, suffix = WRITERS[writer]
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / f"w{suffix}", [build(*r) for r in records], gz)
        changes = read_changes([path])
    last = {gid: (kind, target) for kind, gid, target in records}
    assert {c.id: c.kind for c in changes} == {gid: k for gid, (k, _) in last.items()}
    for gid, (kind, target) in last.items():
        change = changes.get(gid)
        if kind in ("redirected", "announced"):
            assert change.target == target
        if kind in ("heading", "announced"):
            assert change.subject.label() == f"Heading {gid}"


# -- vocab diff ----------------------------------------------------------------------------
def test_vocab_diff_prints_the_counts(tmp_path):
    old = old_vocabulary().save(tmp_path / "gnd")
    week = write_xml(tmp_path / "w.mrc.xml.gz", week_one(), gz=True)
    result = runner.invoke(app, ["vocab", "diff", str(old), str(week), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["counts"]["added"] == 1 and shown["counts"]["announced"] == 1
    assert shown["redirected"] == [{"id": "4000004-4", "target": "4000005-5",
                                    "target_label": "Geschichte"}]
    table = runner.invoke(app, ["vocab", "diff", str(old), str(week)], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "4000004-4 → Geschichte (4000005-5)" in table.stdout
    assert "announced, not yet effective" in table.stdout


def test_vocab_diff_refuses_a_malformed_file_unless_skip_bad(tmp_path):
    old = old_vocabulary().save(tmp_path / "gnd")
    bad = write_binary(tmp_path / "bad.mrc", broken_week())
    refused = runner.invoke(app, ["vocab", "diff", str(old), str(bad)])
    assert refused.exit_code == 1
    assert "2 malformed records" in refused.output and "--skip-bad reads the rest" in \
        refused.output
    skipped = runner.invoke(app, ["vocab", "diff", str(old), str(bad), "--skip-bad",
                                  "--json"])
    assert skipped.exit_code == 0, skipped.output
    assert json.loads(skipped.stdout)["counts"]["deleted"] == 1


def test_vocab_diff_of_two_vocabularies(tmp_path):
    old = tmp_path / "old.tsv"
    old.write_text("gnd_id\tlabel_de\n4000001-1\tBank\n4000002-2\tHolz\n", encoding="utf-8")
    new = tmp_path / "new.tsv"
    new.write_text("gnd_id\tlabel_de\n4000001-1\tBank <Möbel>\n4000009-9\tNeu\n",
                   encoding="utf-8")
    result = runner.invoke(app, ["vocab", "diff", str(old), str(new), "--json"])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)["counts"]
    assert (counts["added"], counts["relabelled"], counts["deleted"]) == (1, 1, 1)


def test_the_worked_week_of_the_docs_reads_as_it_says(tmp_path):
    import re

    page = (Path(__file__).parent.parent / "docs" / "gnd-changes.md").read_text("utf-8")
    blocks = re.findall(r"```xml\n(.*?)```", page, re.S)
    assert len(blocks) == 2
    weeks = []
    for i, block in enumerate(blocks, 31):
        path = tmp_path / f"week-{i}.mrc.xml"
        path.write_text('<collection xmlns="http://www.loc.gov/MARC21/slim">'
                        f"{block}</collection>", encoding="utf-8")
        weeks.append(path)
    vocab = Vocabulary([Subject("4000001-1", {"de": "Bank <Möbel>"}),
                        Subject("4000003-3", {"de": "Möbel"})])
    assert summarize(read_changes(weeks[:1]), vocab).announced == ["4000003-3"]
    both = summarize(read_changes(weeks), vocab)
    assert both.redirected == {"4000003-3": "4000001-1"} and not both.announced
    assert "4000003-3 → Bank <Möbel> (4000001-1)" in page
