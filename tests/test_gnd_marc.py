"""The GND authority dump (MARC 21 authority format) as a vocabulary: the real sample as
the DNB publishes it, pymarc-built records for what it lacks (alternative labels, other
entity types, broken records), MARC-XML and binary, gzipped or not; the saved form; the
`vocab load` / `vocab show` commands."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import unicodedata
from pathlib import Path

import pymarc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from marc_authority import authority, small_dump, write_binary, write_xml
from tagalign.cli import app
from tagalign.io import BadInputError, InputReport
from tagalign.vocab import Subject, Vocabulary, load_vocabulary
from tagalign.vocab.gnd_marc import AuthorityCounts, read_authorities
from tagalign.vocab.loaders import guess_format

runner = CliRunner()


def quiet() -> InputReport:
    return InputReport(stream=io.StringIO())


# -- the real sample -----------------------------------------------------------------------
def test_the_real_sample_loads_as_published(shared_data):
    path = shared_data / "gnd-marc" / "gnd-sachbegriff-sample.mrc.xml"
    assert guess_format(path) == "gnd-marc"
    vocab = load_vocabulary(path)
    assert vocab.ids == ["1096251094", "7647629-7", "4490952-4", "4000002-3"]
    assert [unicodedata.normalize("NFC", s.label()) for s in vocab] == [
        "Viehhändlersprache", "Janus-Pressen-Schrift", "Berufsfachschule für Massage",
        "A 302 D"]
    viehh, janus, massage, a302 = vocab.subjects
    # 550: obin and obpa are broader terms, vbal a related one; 500/510 are not subjects
    assert viehh.broader == ["4116530-5", "4028614-9", "4122634-3"] and not viehh.related
    assert janus.broader == ["7657325-4"] and janus.related == ["7646957-8"]
    assert massage.broader == ["4125138-6"] and a302.broader == ["4027242-4"]
    assert [s.classification for s in vocab] == [
        [("11.1a", "")], [("2.1", "")], [("27.20", ""), ("6.3a", ""), ("6.3b", "")],
        [("31.9b", "")]]
    assert [s.entity_types for s in vocab] == [["s", "sis"], ["s", "sip"], ["s", "saz"],
                                               ["s"]]
    assert all(not s.alt_labels and not s.narrower for s in vocab)  # none in the sample
    assert unicodedata.normalize("NFC", viehh.definition).startswith(
        "Sondersprache von Händlern in Westfalen")
    # ids and labels line up with the GND TSV the other tests use
    with gzip.open(shared_data / "gnd" / "gnd-subjects.tsv.gz", "rt", encoding="utf-8") as fh:
        tsv = {line.split("\t")[0]: line.split("\t")[1] for line in fh}
    assert [tsv[s.id] for s in vocab] == [s.label() for s in vocab]
    # the DNB writes umlauts decomposed (so does the TSV); a composed query finds them
    assert unicodedata.normalize("NFC", viehh.label()) != viehh.label()
    composed = unicodedata.normalize("NFC", "händler")
    assert [s.id for s in vocab.search(composed)] == ["1096251094"]
    assert [m.subject.id for m in vocab.prefix_index.search("viehh" + composed[1:])] == [
        "1096251094"]


# -- pymarc-built records ------------------------------------------------------------------
EXPECTED = [
    Subject("4000001-1", {"de": "Bank <Möbel>"}, {"de": ["Sitzbank", "Bank <Sitzmöbel>"]},
            ["4000003-3"], classification=[("27.20", ""), ("6.3a", "")],
            entity_types=["s", "saz"]),
    Subject("4000002-2", {"de": "Holzschutz"}, {"de": ["Holzkonservierung",
                                                       "Holzschutzverfahren"]},
            ["4000003-3"], related=["4000004-4"], entity_types=["s"]),
    Subject("4000003-3", {"de": "Möbel"}, narrower=["4000001-1", "4000002-2"],
            entity_types=["s"]),
    Subject("4000004-4", {"de": "Pilze"}, {"de": ["Mykologie"]}, related=["4000002-2"],
            entity_types=["s"]),
    Subject("4000005-5", {"de": "Geschichte / Quelle"}, entity_types=["s"]),
]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("marc")
    recs = small_dump()
    return {
        "xml": write_xml(root / "dump.mrc.xml", recs),
        "xml.gz": write_xml(root / "authorities-gnd-sachbegriff_dnbmarc_20240213.mrc.xml.gz",
                            recs, gz=True),
        # gzip told by its bytes, not the name
        "xml, gzipped, plain name": write_xml(root / "plain.mrc.xml", recs, gz=True),
        "mrc": write_binary(root / "dump.mrc", recs),
        "mrc.gz": write_binary(root / "dump.mrc.gz", recs, gz=True),
    }


@pytest.mark.parametrize("kind", ["xml", "xml.gz", "xml, gzipped, plain name", "mrc",
                                  "mrc.gz"])
def test_every_encoding_gives_the_same_subjects(dumps, kind):
    assert guess_format(dumps[kind]) == "gnd-marc"
    report = quiet()
    vocab = load_vocabulary(dumps[kind], report=report)
    assert vocab.subjects == EXPECTED
    assert report.n_skipped == 1 and "record 9" in report.skipped[0]
    assert "no preferred label (150 $a)" in report.skipped[0]


def test_other_records_are_skipped_and_counted(dumps):
    counts = AuthorityCounts()
    report = quiet()
    got = list(read_authorities(dumps["xml"], report, counts))
    assert [s.id for s in got] == [s.id for s in EXPECTED]
    assert counts.subjects == 5
    assert dict(counts.skipped) == {"entity type p": 1, "entity type b": 1, "deleted": 1}
    assert counts.summary() == ("5 subject headings; 3 other records skipped "
                                "(entity type p: 1, entity type b: 1, deleted: 1)")


def test_a_file_cut_short_keeps_the_records_before_the_cut(dumps, tmp_path):
    # long enough that the cut falls after the first blocks the XML parser reads
    many = [authority(f"50{i:05d}-0", f"Thema {i}") for i in range(300)]
    data = write_xml(tmp_path / "full.mrc.xml.gz", many, gz=True).read_bytes()
    cut = tmp_path / "cut.mrc.xml.gz"
    cut.write_bytes(data[:len(data) // 2])
    report = quiet()
    vocab = load_vocabulary(cut, report=report)
    assert 0 < len(vocab) < 300 and vocab.ids == [f"50{i:05d}-0" for i in range(len(vocab))]
    assert report.skipped == [
        f"{cut}: compressed data ends early after {len(vocab)} records"]
    with pytest.raises(BadInputError, match="ends early"):
        load_vocabulary(cut, report=InputReport(strict=True))
    broken = tmp_path / "broken.mrc.xml"
    parts = dumps["xml"].read_text(encoding="utf-8").split("</record>")
    # the second record's end tag mistyped: the first record still loads
    broken.write_text("</record>".join(parts[:2]) + "</recrd>" + "</record>".join(parts[2:]),
                      encoding="utf-8")
    report = quiet()
    assert load_vocabulary(broken, report=report).ids == ["4000001-1"]
    assert "not well-formed MARC-XML after 1 records" in report.skipped[-1]


def test_format_guess_keeps_skos_xml_apart(dumps, tmp_path):
    marc_named_xml = tmp_path / "gnd.xml"
    shutil.copy(dumps["xml"], marc_named_xml)
    assert guess_format(marc_named_xml) == "gnd-marc"
    skos = tmp_path / "vocab.rdf.xml"
    skos.write_text('<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/'
                    '02/22-rdf-syntax-ns#" xmlns:skos="http://www.w3.org/2004/02/skos/core#">'
                    '\n</rdf:RDF>\n', encoding="utf-8")
    assert guess_format(skos) == "skos"


def test_a_single_bare_record_file(tmp_path):
    path = tmp_path / "one.xml"
    path.write_bytes(pymarc.record_to_xml(authority("4000009-9", "Epos"), namespace=True))
    assert load_vocabulary(path, format="gnd-marc").ids == ["4000009-9"]


def test_records_in_a_prefixed_namespace_among_other_elements(tmp_path):
    """The reader tells records by their tag alone, whatever comes between them (it skips
    tags it has seen not to be a record's without looking again)."""
    recs = [authority("4000009-9", "Epos"), authority("4000010-1", "Held")]
    xml = write_xml(tmp_path / "plain.xml", recs).read_text(encoding="utf-8")
    prefixed = re.sub(r"<(/?)(collection|record|leader|controlfield|datafield|subfield)\b",
                      r"<\1marc:\2", xml.replace('xmlns="', 'xmlns:marc="'))
    # an element of another kind between the records, and a bare record after them
    prefixed = prefixed.replace("</marc:record>", "</marc:record><note>x</note>", 1)
    bare = pymarc.record_to_xml(authority("4000011-2", "Sage")).decode("utf-8")
    path = tmp_path / "prefixed.mrc.xml"
    path.write_text(prefixed.replace("</marc:collection>", bare + "</marc:collection>"),
                    encoding="utf-8")
    assert "<marc:record" in path.read_text(encoding="utf-8")
    vocab = load_vocabulary(path, report=quiet())
    assert vocab.ids == ["4000009-9", "4000010-1", "4000011-2"]
    assert [s.label() for s in vocab] == ["Epos", "Held", "Sage"]


# -- the saved form ------------------------------------------------------------------------
def test_saved_form_keeps_alt_labels_relations_types(dumps, tmp_path):
    vocab = load_vocabulary(dumps["xml.gz"], report=quiet())
    back = Vocabulary.load(vocab.save(tmp_path / "v"))
    assert back.subjects == EXPECTED and back.fingerprint == vocab.fingerprint
    assert back.search("mykolog")[0].id == "4000004-4"


def test_a_vocabulary_without_the_new_columns_saves_and_loads_as_before(tmp_path):
    plain = Vocabulary([Subject("1", {"de": "Epos"}), Subject("2", {"de": "Held"})])
    path = plain.save(tmp_path / "v")
    cols = json.loads(gzip.decompress(path.read_bytes()))
    # the columns of the saved form before entity types existed, no more
    assert list(cols) == ["format", "version", "fingerprint", "ids", "labels", "alt_labels",
                          "broader", "narrower", "related", "classification", "definition"]
    assert Vocabulary.load(path).subjects == plain.subjects


def test_the_saved_form_is_the_json_it_always_was(dumps, tmp_path):
    """Written with orjson, read back by any JSON reader: the bytes of ``json.dumps(cols,
    ensure_ascii=False, separators=(",", ":"))``, control characters and all."""
    vocab = load_vocabulary(dumps["xml"], report=quiet())
    vocab.subjects[0].labels["de"] += ' "\\ \x00\x1f\x7f\t\n ä\u0308 \u2028 \U0001f600'
    vocab.subjects[1].definition = "Zeile 1\r\nZeile 2"
    data = gzip.decompress(vocab.save(tmp_path / "v").read_bytes())
    cols = json.loads(data)
    assert data == json.dumps(cols, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    back = Vocabulary.load(tmp_path / "v")
    assert back.subjects == vocab.subjects and back.fingerprint == vocab.fingerprint


# -- the commands --------------------------------------------------------------------------
def test_vocab_load_counts_and_show_by_alt_label(dumps, tmp_path):
    wide = {"COLUMNS": "200"}
    res = runner.invoke(app, ["vocab", "load", str(dumps["xml.gz"]), "--out",
                              str(tmp_path / "v")], env=wide)
    assert res.exit_code == 0, res.output
    said = " ".join(res.stderr.split())  # the log line may wrap
    assert "5 subjects loaded" in said and "1 malformed lines/entries skipped" in said
    assert ("5 subject headings; 3 other records skipped (entity type p: 1, entity type b: "
            "1, deleted: 1)") in said
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "4000002-2"], env=wide)
    assert res.exit_code == 0, res.stderr
    for text in ("Holzkonservierung, Holzschutzverfahren", "broader: Möbel (4000003-3)",
                 "related: Pilze (4000004-4)"):
        assert text in res.stdout
    # by an alternative label, any case: the subject it belongs to
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "mykologie"], env=wide)
    assert res.exit_code == 0, res.stderr
    assert "4000004-4" in res.stdout and "related: Holzschutz (4000002-2)" in res.stdout
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "Möbel"], env=wide)
    assert "narrower: Bank <Möbel> (4000001-1)" in res.stdout
    assert "narrower: Holzschutz (4000002-2)" in res.stdout
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "--search", "sitzm"],
                        env=wide)
    assert "4000001-1" in res.stdout and "type: s, saz" in res.stdout
    res = runner.invoke(app, ["vocab", "show", str(tmp_path / "v"), "Nichts"])
    assert res.exit_code == 1 and "no label equals it" in res.output


# -- damaged dumps -------------------------------------------------------------------------
def _dump_bytes(tmp: Path) -> dict[str, bytes]:
    return {"mrc.xml": write_xml(tmp / "d.mrc.xml", small_dump()).read_bytes(),
            "mrc": write_binary(tmp / "d.mrc", small_dump()).read_bytes()}


@pytest.fixture(scope="module")
def dump_bytes(tmp_path_factory) -> dict[str, bytes]:
    return _dump_bytes(tmp_path_factory.mktemp("bytes"))


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["mrc.xml", "mrc"]), gz=st.booleans(), cut=st.floats(0, 1),
       flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=4))
def test_damaged_dumps_never_raise(dump_bytes, tmp_path_factory, kind, gz, cut, flips):
    """Cut and overwritten bytes cost records, reported, never the run."""
    data = bytearray(dump_bytes[kind])
    for where, byte in flips:
        data[int(where * (len(data) - 1))] = byte
    data = bytes(data[:max(1, int(cut * len(data)))])
    path = tmp_path_factory.mktemp("dmg") / f"d.{kind}{'.gz' if gz else ''}"
    path.write_bytes(gzip.compress(data) if gz else data)
    got = list(read_authorities(path, quiet()))
    assert all(s.id and s.label() for s in got)
    if not flips:  # only cut: the records before the cut, as they were
        assert [s.id for s in got] == [s.id for s in EXPECTED][:len(got)]


# -- other entity types (issue 48: `vocab load --entity-types`) ----------------------------
def test_entity_types_on_request_keep_their_type_and_own_headings(tmp_path):
    from pymarc import Field, Indicators, Subfield

    from tagalign.vocab.gnd_marc import heading

    recs = small_dump()
    place = authority("4005728-8", ("Berlin", None), types=("g", "gik"), heading_tag="151")
    place.add_field(Field("451", Indicators(" ", " "), [Subfield("a", "Berolinum")]))
    recs.append(place)
    path = write_xml(tmp_path / "all.mrc.xml", recs)
    counts = AuthorityCounts()
    got = {s.id: s for s in read_authorities(path, quiet(), counts,
                                             types=frozenset({"s", "p", "g"}))}
    assert got["118621890"].label() == "Tiemann, Walter"
    assert got["118621890"].entity_types == ["p", "piz"]
    assert got["4005728-8"].label() == "Berlin" and got["4005728-8"].alt_labels == {
        "de": ["Berolinum"]}
    assert "2021270-8" not in got  # b was not asked for
    assert dict(counts.kept) == {"s": 5, "p": 1, "g": 1}
    assert dict(counts.skipped) == {"entity type b": 1, "deleted": 1}
    assert counts.summary() == ("7 headings (s: 5, p: 1, g: 1); 2 other records skipped "
                                "(entity type b: 1, deleted: 1)")
    # "all" through load_vocabulary: the corporate body too, subject headings unchanged
    vocab = load_vocabulary(path, report=quiet(), entity_types="all")
    assert vocab.get("2021270-8").label() == "Gebr. Klingspor"
    assert [vocab.get(s.id) for s in EXPECTED] == EXPECTED
    # the default is subject headings only, as before
    assert load_vocabulary(path, report=quiet()).ids == [s.id for s in EXPECTED]
    # headings of the other kinds as the DNB displays them (dates left out)
    assert heading([("a", "Friedrich"), ("b", "II."), ("c", "Preußen, König"),
                    ("d", "1712-1786")]) == "Friedrich II., Preußen, König"
    assert heading([("a", "Universität Leipzig"), ("b", "Bibliothek")]) == (
        "Universität Leipzig. Bibliothek")
    assert heading([("a", "Goethe, Johann Wolfgang von"), ("t", "Faust"), ("n", "1")]) == (
        "Goethe, Johann Wolfgang von / Faust, 1")


def test_vocab_load_entity_types_refuses_unknown_codes_and_other_formats(dumps, tmp_path):
    res = runner.invoke(app, ["vocab", "load", str(dumps["xml"]), "--out", str(tmp_path / "v"),
                              "--entity-types", "s,p,b"])
    assert res.exit_code == 0, res.output
    said = " ".join(res.stderr.split())
    assert "7 subjects loaded" in said and "7 headings (s: 5, p: 1, b: 1)" in said
    saved = Vocabulary.load(tmp_path / "v")
    assert saved.get("2021270-8").entity_types == ["b", "kiz"]  # kept in the saved form
    res = runner.invoke(app, ["vocab", "load", str(dumps["xml"]), "--out", str(tmp_path / "w"),
                              "--entity-types", "s,x"])
    assert res.exit_code != 0 and "unknown GND entity type(s) x" in res.output
    tsv = tmp_path / "v.tsv"
    tsv.write_text("4000001-1\tBank\n", encoding="utf-8")
    res = runner.invoke(app, ["vocab", "load", str(tsv), "--out", str(tmp_path / "t"),
                              "--entity-types", "s"])
    assert res.exit_code != 0 and "GND authority dump (format gnd-marc) only" in res.output
    assert not (tmp_path / "w").exists() and not (tmp_path / "t").exists()


@pytest.mark.parametrize(("writer", "gz"), [(write_binary, True), (write_xml, False)])
def test_reading_a_dump_reports_the_bytes_read_for_a_time_left(tmp_path, writer, gz):
    """`vocab load` of the whole dump takes minutes (issue 63): the reader tells how many of
    the file's bytes it has read (of a gzipped dump, the compressed ones), every 5,000
    records, from 0 to the file's size."""
    path = writer(tmp_path / ("d.mrc.gz" if gz else "d.mrc.xml"),
                  [authority(f"{i}-0", f"Heading {i}") for i in range(12_000)], gz=gz)
    events: list[tuple[str, int, int]] = []
    got = list(read_authorities(path, InputReport(), progress=lambda *e: events.append(e)))
    size = path.stat().st_size
    assert len(got) == 12_000 and {phase for phase, _, _ in events} == {f"reading {path.name}"}
    assert [t for _, _, t in events] == [size] * 4
    done = [d for _, d, _ in events]
    assert done[0] == 0 and done[-1] == size and 0 < done[1] < done[2] < size


@pytest.mark.parametrize("command", ["vocab load", "train --vocab"])
def test_loading_a_dump_shows_the_bytes_read(tmp_path, monkeypatch, command):
    """`vocab load` and `train --vocab` of a dump: the same bar of the bytes read."""
    from tagalign.cli import common

    seen: list[tuple[str, int, int]] = []
    real = common.PhaseBars

    class Spy(real):  # type: ignore[misc, valid-type]
        def __call__(self, phase: str, done: int, total: int) -> None:
            seen.append((phase, done, total))
            super().__call__(phase, done, total)

    monkeypatch.setattr(common, "PhaseBars", Spy)
    dump = write_xml(tmp_path / "auth.mrc.xml", small_dump())
    if command == "vocab load":
        args = ["vocab", "load", str(dump), "--out", str(tmp_path / "v")]
    else:
        train = tmp_path / "train.jsonl"
        train.write_text("".join(json.dumps({
            "id": f"r{i}", "title": "Holzschutz für Möbel", "language": "de",
            "subjects": ["4000002-2", "4000003-3"]}) + "\n" for i in range(5)), "utf-8")
        args = ["train", str(tmp_path / "p"), "--vocab", str(dump), "--train", str(train),
                "--recipe", "lexical"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    size = dump.stat().st_size
    assert seen == [("reading auth.mrc.xml", 0, size), ("reading auth.mrc.xml", size, size)]
