"""Damaged MARC 21, structure by structure (issue 46): the readers of bibliographic records
(`tagalign.records.marc`, both decoders) and of the GND authority dump
(`tagalign.vocab.gnd_marc`) meet leaders with bad lengths, non-digits and base addresses
beyond the record; directory entries out of range, truncated, overlapping; field
terminators missing; records shorter or longer than their leader says; leader/09 that
lies about the character set; MARC-XML without a namespace, with another root, or with
entity expansion (billion laughs, an external entity).

Each damaged record is one item of a file of good ones (the framing at end-of-record marks
is kept, as a broken export keeps it). For every case: nothing raises; every undamaged
record comes out as read alone, in order; each damaged one is either read (a change the
format cannot see) or reported once, by its number, with a reason in words (no Python
exception text); a record that is read holds no framing bytes; nothing is written beside
the file. Hypothesis runs derandomized (the same examples every run); the example counts
are `N_EXAMPLES` per property.
"""

from __future__ import annotations

import io
import re
import resource
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from marc_authority import authority
from marc_fixtures import binary, plain_record
from tagalign.cli import app
from tagalign.io import InputReport
from tagalign.records import read_records
from tagalign.records.marc.binary import fast_record, pymarc_record
from tagalign.records.marc.fields import record_from_marc
from tagalign.records.marc.reader import iter_marc_records
from tagalign.vocab.gnd_marc import read_authorities

N_EXAMPLES = 60
FUZZ = settings(max_examples=N_EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])
#: what a reason must not read like: a Python exception's own text instead of words
PYTHON_TEXT = re.compile(r"invalid literal|NoneType|has no attribute|index out of range|"
                         r"codec can't|object is not|unsupported operand|Traceback|^\w+Error$")
FRAMING = re.compile("[\x1d\x1e\x1f]")
FILLER = b"\r\n\t \x00\x1a"

titles = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30
                 ).map(str.strip).filter(bool)


def _quiet() -> InputReport:
    return InputReport(stream=io.StringIO())


def _splice(chunk: bytes, at: int, new: bytes, width: int) -> bytes:
    return chunk[:at] + new + chunk[at + width:]


def _directory_span(chunk: bytes) -> tuple[int, int]:
    return 24, int(chunk[12:17]) - 1


@st.composite
def damage(draw, chunk: bytes) -> tuple[str, bytes]:
    """(what was done, the record damaged one way); end-of-record marks stay framing."""
    kind = draw(st.sampled_from(["length", "base", "entry", "directory", "terminator",
                                 "short", "long", "coding", "bytes"]))
    numbers = st.integers(0, 99999).map(lambda v: b"%05d" % v)
    junk5 = st.binary(min_size=5, max_size=5)
    d0, d1 = _directory_span(chunk)
    if kind == "length":  # 0, huge, off by some, or no number at all
        out = _splice(chunk, 0, draw(numbers | junk5 | st.sampled_from([b"00000", b"99999"])),
                      5)
    elif kind == "base":  # beyond the record, inside the directory, not digits
        out = _splice(chunk, 12, draw(numbers | junk5), 5)
    elif kind == "entry":  # one entry's length or offset out of range (or not a number)
        i = draw(st.integers(0, (d1 - d0) // 12 - 1))
        at, width = draw(st.sampled_from([(3, 4), (7, 5), (0, 3)]))
        new = draw(st.binary(min_size=width, max_size=width)
                   | st.integers(0, 10 ** width - 1).map(lambda v, w=width: b"%0*d" % (w, v)))
        out = _splice(chunk, d0 + 12 * i + at, new, width)
    elif kind == "directory":  # truncated or with entries overlapping (one copied on another)
        if draw(st.booleans()):
            cut = draw(st.integers(1, d1 - d0))
            out = chunk[:d1 - cut] + chunk[d1:]
        else:
            i, j = draw(st.integers(0, (d1 - d0) // 12 - 1)), draw(st.integers(0, 11))
            entry = chunk[d0 + 12 * i:d0 + 12 * i + 12]
            out = _splice(chunk, d0 + 12 * i, entry[:3] + entry[3:7] + b"%05d" % (
                int(entry[7:12]) + draw(st.integers(1, 9)) if entry[7:12].isdigit() else j),
                12)
    elif kind == "terminator":  # a field terminator lost or changed
        marks = [m.start() for m in re.finditer(b"\x1e", chunk)]
        at = draw(st.sampled_from(marks))
        out = chunk[:at] + draw(st.sampled_from([b"", b" ", b"\x1f", b"x"])) + chunk[at + 1:]
    elif kind == "short":  # cut inside, the leader's length unchanged
        out = chunk[:draw(st.integers(1, len(chunk) - 2))] + b"\x1d"
    elif kind == "long":  # bytes after the data, the leader's length unchanged
        out = chunk[:-1] + draw(st.binary(min_size=1, max_size=20)) + b"\x1d"
    elif kind == "coding":  # leader/09 says another character set than the bytes are
        out = _splice(chunk, 9, draw(st.sampled_from([b" ", b"a", b"z", b"\xff"])), 1)
        if draw(st.booleans()):  # and the text as Latin-1, not UTF-8
            head = int(out[12:17]) if out[12:17].isdigit() else 24
            body = out[head:].decode("utf-8", "replace").encode("latin-1", "replace")
            out = out[:head] + body
    else:  # any bytes over the leader and the directory
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, d1))
            out = chunk = _splice(chunk, at, draw(st.binary(min_size=1, max_size=1)), 1)
        out = chunk
    out = out.rstrip(b"\x1d").replace(b"\x1d", b"") + b"\x1d"
    if not out.strip(FILLER + b"\x1d"):  # nothing left of it: not a record in the file
        out = b"x" + out
    return kind, out


@st.composite
def damaged_files(draw) -> tuple[list[bytes], list[int]]:
    """Records ``id0`` … as bytes, some damaged (their indices)."""
    n = draw(st.integers(2, 6))
    chunks = [binary([plain_record(f"id{i}", draw(titles), agency="DE-101")])
              for i in range(n)]
    bad = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n)))
    for i in bad:
        chunks[i] = draw(damage(chunks[i]))[1]
    return chunks, bad


def _read(tmp: Path, data: bytes | str, name: str, read):
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    report = _quiet()
    got = list(read(path, report))
    assert [p.name for p in tmp.iterdir()] == [name]  # nothing written beside it
    return path, got, report


def _check_report(path: Path, report: InputReport, bad: list[int], total: int, n_read: int):
    assert n_read + report.n_skipped == total  # every record read or reported, once
    for line in report.skipped:
        m = re.match(rf"{re.escape(str(path))}: record (\d+) \(byte \d+\): (.+)$", line)
        assert m, line
        assert int(m[1]) - 1 in bad, line  # only damaged records are reported
        assert not PYTHON_TEXT.search(m[2]), line


@FUZZ
@given(case=damaged_files())
def test_bibliographic_binary_damage_costs_that_record_only(case, tmp_path_factory):
    chunks, bad = case
    good = [i for i in range(len(chunks)) if i not in bad]
    alone = {(r := fast_record(chunks[i])).id: r for i in good}
    tmp = tmp_path_factory.mktemp("bib")
    path, got, report = _read(tmp, b"".join(chunks), "r.mrc",
                              lambda p, rep: read_records(p, format="marc", report=rep))
    assert [r for r in got if r.id in alone] == list(alone.values())
    for rec in got:
        assert not FRAMING.search(rec.id + rec.title), rec
    _check_report(path, report, bad, len(chunks), len(got))
    # the pymarc decoder (suggest --format marc --merge reads and writes back these records)
    path, items, report = _read(tmp_path_factory.mktemp("bib"), b"".join(chunks), "r.mrc",
                                lambda p, rep: list(iter_marc_records(p, rep)))
    assert [r for _, r in items if r.id in alone] == list(alone.values())
    for item, _ in items:
        for field in item.record.fields:
            text = field.data if field.control_field else "".join(
                s.value for s in field.subfields)
            assert not FRAMING.search(text), field
    _check_report(path, report, bad, len(chunks), len(items))


@FUZZ
@given(title=titles, data=st.data())
def test_both_decoders_take_or_refuse_a_damaged_record_alike(title, data):
    """The fast decoder (UTF-8 records) reads what pymarc reads, the same way; it may take
    a record whose damage is in a field it does not read."""
    chunk = binary([plain_record("id1", title, agency="DE-101")])
    _, damaged = data.draw(damage(chunk))
    try:
        slow = record_from_marc(pymarc_record(damaged))
    except ValueError:
        return
    assert fast_record(damaged) == slow


@FUZZ
@given(labels=st.lists(titles, min_size=2, max_size=5), data=st.data())
def test_authority_binary_damage_costs_that_record_only(labels, data, tmp_path_factory):
    ids = [f"400000{i}-{i}" for i in range(len(labels))]
    chunks = [binary([authority(g, label)]) for g, label in zip(ids, labels, strict=True)]
    bad = sorted(data.draw(st.sets(st.integers(0, len(chunks) - 1), min_size=1)))
    for i in bad:
        chunks[i] = data.draw(damage(chunks[i]))[1]
    path, got, report = _read(tmp_path_factory.mktemp("gnd"), b"".join(chunks), "v.mrc",
                              lambda p, rep: read_authorities(p, rep))
    good = [(ids[i], labels[i]) for i in range(len(chunks)) if i not in bad]
    assert [(s.id, s.labels["de"]) for s in got if s.id in dict(good)] == good
    for s in got:
        assert not FRAMING.search(s.id + s.labels["de"]), s
    _check_report(path, report, bad, len(chunks), len(got))


def test_a_record_that_says_marc8_but_is_utf8_is_read_as_utf8():
    chunk = binary([plain_record("id1", "Schäden am Fachwerk Ωμέγα")])
    assert chunk[9:10] == b"a"
    marc8 = chunk[:9] + b" " + chunk[10:]
    assert fast_record(marc8).title == "Schäden am Fachwerk Ωμέγα"
    assert record_from_marc(pymarc_record(marc8)).title == "Schäden am Fachwerk Ωμέγα"
    latin1 = chunk.replace("ä".encode(), b"\xe4\x20")  # UTF-8 says the leader; Latin-1 it is
    with pytest.raises(ValueError, match="field 245 is not valid UTF-8"):
        fast_record(latin1)


def test_records_stats_counts_damaged_records_and_keeps_the_rest(tmp_path):
    chunks = [binary([plain_record(f"id{i}", f"Titel {i}")]) for i in range(4)]
    chunks[1] = b"99999" + chunks[1][5:]  # a leader length beyond the record
    d0 = 24 + 3  # the first entry's length, far past the end
    chunks[2] = chunks[2][:d0] + b"9999" + chunks[2][d0 + 4:]
    path = tmp_path / "r.mrc"
    path.write_bytes(b"".join(chunks))
    res = CliRunner().invoke(app, ["records", "stats", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert re.search(r"records\s+│\s+2\b", res.stdout), res.stdout
    assert re.search(r"malformed items skipped\s+│\s+2\b", res.stdout), res.stdout
    said = " ".join(res.stderr.split())
    assert "record 2 (byte" in said and "the leader gives a length of 99999 bytes" in said
    assert "record 3 (byte" in said and "field 001 (length 9999 at offset 0) runs past" in said


# -- MARC-XML ------------------------------------------------------------------------------
NS = ' xmlns="http://www.loc.gov/MARC21/slim"'
BIB = ('<record><leader>00000nam a2200000   4500</leader><controlfield tag="001">{id}'
       '</controlfield><datafield tag="245" ind1="0" ind2="0"><subfield code="a">{title}'
       '</subfield></datafield></record>')
AUT = ('<record><leader>00000nz  a2200000nc 4500</leader><controlfield tag="001">{id}'
       '</controlfield><datafield tag="035" ind1=" " ind2=" "><subfield code="a">(DE-588)'
       '{id}</subfield></datafield><datafield tag="150" ind1=" " ind2=" "><subfield code="a">'
       '{title}</subfield></datafield></record>')


def _laughs(depth: int = 10) -> str:
    ents = '<!ENTITY lol0 "lollollollollollollollollollol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, depth))
    return f"<!DOCTYPE collection [{ents}]>"


def _both(tmp: Path, doc: str) -> tuple[list, InputReport, list, InputReport]:
    """What both XML readers make of ``doc`` (bibliographic: ``BIB``, authority: ``AUT``)."""
    _, bib, bib_report = _read(tmp / "bib", doc.format_map(_Fill(BIB)), "r.xml",
                               lambda p, rep: read_records(p, format="marc", report=rep))
    _, aut, aut_report = _read(tmp / "aut", doc.format_map(_Fill(AUT)), "v.mrc.xml",
                               lambda p, rep: read_authorities(p, rep))
    return [r.id for r in bib], bib_report, [s.id for s in aut], aut_report


class _Fill(dict):
    """``{r1}`` … in a document: record 1 … of the template (ids ``1-1`` …)."""

    def __init__(self, template: str):
        super().__init__()
        self.template = template

    def __missing__(self, key: str) -> str:
        n = int(key[1:])
        return self.template.format(id=f"{n}-{n}", title=f"Titel {n}")


@pytest.mark.parametrize("doc, bib_ids, aut_ids", [
    (f"<collection{NS}>{{r1}}{{r2}}</collection>", ["1-1", "2-2"], ["1-1", "2-2"]),
    ("<collection>{r1}{r2}</collection>", ["1-1", "2-2"], ["1-1", "2-2"]),  # no namespace
    ('<collection xmlns="urn:other">{r1}{r2}</collection>', ["1-1", "2-2"], ["1-1", "2-2"]),
    ("<zs:response xmlns:zs='urn:x'><zs:records>{r1}</zs:records>{r2}</zs:response>",
     ["1-1", "2-2"], ["1-1", "2-2"]),  # another root, records at two depths
    (f"<record{NS}><leader>00000nz  a2200000nc 4500</leader></record>", [], []),
    ("<collection><foo/>plain text<bar><baz/></bar></collection>", [], []),  # no record
    ("<?xml version='1.0' encoding='ISO-8859-1'?><collection>{r1}</collection>",
     ["1-1"], ["1-1"]),
], ids=["namespaced", "no-namespace", "other-namespace", "other-root", "empty-record",
        "no-records", "latin1-declared"])
def test_marc_xml_oddities_read_what_is_there(doc, bib_ids, aut_ids, tmp_path):
    bib, bib_report, aut, _ = _both(tmp_path, doc)
    assert bib == bib_ids and aut == aut_ids
    assert not any(PYTHON_TEXT.search(line) for line in bib_report.skipped)


def test_billion_laughs_is_refused_fast_and_small(tmp_path):
    """expat (2.4 and later, the stdlib's parser) stops entity amplification; no reader
    builds the gigabytes the entities stand for."""
    doc = (f'<?xml version="1.0"?>{_laughs()}<collection>'
           + BIB.format(id="&lol9;", title="&lol9;") + "{r2}</collection>")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    bib, bib_report, aut, aut_report = _both(tmp_path, doc)
    assert time.monotonic() - start < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200_000  # KiB
    assert all("lol" not in i for i in bib + aut)
    # the bibliographic reader skips the record and reads on; the authority reader stops
    assert bib == ["2-2"] and "amplification" in " ".join(bib_report.skipped)
    assert aut == [] and "amplification" in " ".join(aut_report.skipped)


def test_external_entities_are_never_fetched(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    doc = (f'<?xml version="1.0"?><!DOCTYPE collection [<!ENTITY x SYSTEM "{secret.as_uri()}">'
           f'<!ENTITY y SYSTEM "http://127.0.0.1:9/x">]><collection>'
           + BIB.format(id="1-1", title="T&x;&y;") + "{r2}</collection>")
    bib_path = tmp_path / "bib" / "r.xml"
    bib, _, aut, aut_report = _both(tmp_path, doc)
    assert bib == ["1-1", "2-2"]
    got = list(read_records(bib_path, format="marc", report=_quiet()))
    assert all("TOP-SECRET" not in r.title for r in got)
    assert aut == [] and "undefined entity" in " ".join(aut_report.skipped)


xml_values = st.text(st.sampled_from(list("ab0129 <>&\"'\x1f;#x")), max_size=6)


@FUZZ
@given(n=st.integers(2, 5), data=st.data())
def test_marc_xml_odd_attributes_and_leaders_cost_that_record_only(n, data,
                                                                  tmp_path_factory):
    """Tags, indicators, subfield codes and leaders of any text (escaped, so the XML stays
    well-formed): a record with an impossible one is reported, the others read."""
    from xml.sax.saxutils import quoteattr

    bad = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    parts = []
    for i in range(n):
        if i not in bad:
            parts.append(BIB.format(id=f"id{i}", title=f"Titel {i}"))
            continue
        tag, ind, code, leader = (data.draw(xml_values) for _ in range(4))
        parts.append(
            f"<record><leader>{leader.replace('&', '&amp;').replace('<', '&lt;')}</leader>"
            f'<controlfield tag="001">id{i}</controlfield><datafield tag={quoteattr(tag)} '
            f"ind1={quoteattr(ind)} ind2=' '><subfield code={quoteattr(code)}>v</subfield>"
            "</datafield></record>")
    doc = f"<collection{NS}>" + "\n".join(parts) + "</collection>"
    path, got, report = _read(tmp_path_factory.mktemp("xml"), doc.encode("utf-8",
                                                                          "surrogatepass"),
                              "r.xml", lambda p, rep: read_records(p, format="marc",
                                                                   report=rep))
    want = [f"id{i}" for i in range(n) if i not in bad]
    assert [r.id for r in got if r.id in want] == want
    assert len(got) + report.n_skipped == n
    assert not any(PYTHON_TEXT.search(line) for line in report.skipped)
