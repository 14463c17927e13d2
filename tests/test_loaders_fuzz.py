"""Property tests for every record, vocabulary, prediction and pair loader (issue 12).

For each format: arbitrary bytes (plain or behind a gzip header) and arbitrary JSON never
raise out of the loader; well-formed items interleaved with garbage lines come out intact
and in order, and each garbage line is reported once. Hypothesis runs derandomized (the
same examples every run) with bounded example counts.
"""

from __future__ import annotations

import gzip
import io
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tagalign.pairs.data import load_comedi, load_wic_jsonl
from tagalign.predictions import read_predictions, read_submission
from tagalign.records import InputReport, Record, read_records
from tagalign.vocab import VOCAB_FORMATS

FUZZ = settings(max_examples=40, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
N_EXAMPLES = 40

RECORD_FILES = {"jsonl": "r.jsonl", "annif-tsv": "r.tsv", "jsonld": "r.jsonld", "marc": "r.mrc"}
VOCAB_FILES = {"gnd-tsv": "v.tsv", "annif-tsv": "v.tsv", "invenio-yaml": "v.yaml",
               "gnd-json": "v.json", "skos": "v.ttl"}


def _quiet() -> InputReport:
    return InputReport(stream=io.StringIO())


def _with_file(name: str, data: bytes, fn: Callable[[Path], object]) -> object:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        return fn(path)


def _load_everything(data: bytes, gz: bool) -> None:
    """Run every loader on ``data``; any exception fails the property."""
    for fmt, name in RECORD_FILES.items():
        name = name + ".gz" if gz and fmt != "jsonld" else name
        _with_file(name, data, lambda p, fmt=fmt: list(read_records(p, format=fmt,
                                                                     report=_quiet())))
    for fmt, name in VOCAB_FILES.items():
        name = name + ".gz" if gz and fmt != "skos" else name
        _with_file(name, data, lambda p, fmt=fmt: list(VOCAB_FORMATS[fmt](p, report=_quiet())))
    # MARC-XML: the same bytes inside a record, so expat and the record builder meet them
    _with_file("r.xml", b"<collection><record><leader>" + data, lambda p: list(
        read_records(p, format="marc", report=_quiet())))
    for name in ("v.mrc", "v.mrc.xml"):  # the GND authority dump: binary or MARC-XML
        _with_file(name, data, lambda p: list(VOCAB_FORMATS["gnd-marc"](p, report=_quiet())))
    _with_file("skos.nt", data, lambda p: list(VOCAB_FORMATS["skos"](p, report=_quiet())))
    _with_file("skos.rdf", data, lambda p: list(VOCAB_FORMATS["skos"](p, report=_quiet())))
    _with_file("p.jsonl.gz" if gz else "p.jsonl", data,
               lambda p: read_predictions(p, _quiet()))

    def submission(path: Path) -> None:
        sub = path.parent / "sub" / "Book" / "de"
        sub.mkdir(parents=True)
        (sub / "x.json").write_bytes(data)
        read_submission(path.parent / "sub", _quiet())

    _with_file("ignored", b"", submission)
    _with_file("w.jsonl", data, lambda p: load_wic_jsonl(p, report=_quiet()))

    def comedi(path: Path) -> None:  # the CoMeDi TSV files behind their headers
        lang = path.parent / "german"
        lang.mkdir()
        (lang / "uses.tsv").write_bytes(b"identifier\tlemma\tcontext\tindices_target_token\n"
                                        + data)
        (lang / "instances.tsv").write_bytes(b"identifier1\tidentifier2\tlemma\n" + data)
        (lang / "labels.tsv").write_bytes(b"identifier1\tidentifier2\tmedian_cleaned\n" + data)
        load_comedi(path.parent, _quiet())

    _with_file("ignored", b"", comedi)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
# keys that our formats look for, so arbitrary JSON reaches past the first checks
known_keys = st.sampled_from(["id", "title", "abstract", "lang", "type", "subjects",
                              "domains", "Code", "Name", "Alternate Name", "Related Subjects",
                              "Classification Number", "dcterms:subject", "@graph",
                              "sentence1", "sentence2", "start1", "end1", "start2", "end2",
                              "label"])
json_objects = st.dictionaries(known_keys, json_values, max_size=6)


@FUZZ
@given(data=st.binary(max_size=400), gz=st.booleans())
def test_arbitrary_bytes_never_raise(data, gz):
    _load_everything(data, gz)


@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_behind_a_gzip_header_never_raise(data):
    # real gzip framing around random text, then cut or corrupted at a random point
    packed = gzip.compress(data)
    for cut in (len(packed), len(packed) // 2, 11):
        _load_everything(packed[:cut], gz=True)


@FUZZ
@given(values=st.lists(json_values | json_objects, min_size=1, max_size=6))
def test_arbitrary_json_never_raises(values):
    lines = "\n".join(json.dumps(v, ensure_ascii=False) for v in values).encode("utf-8",
                                                                                "surrogatepass")
    _load_everything(lines, gz=False)
    whole = json.dumps(values, ensure_ascii=False).encode("utf-8", "surrogatepass")
    _load_everything(whole, gz=False)
    _load_everything(json.dumps({"@graph": values}).encode(), gz=False)


# -- well-formed items interleaved with garbage -----------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"),
                             blacklist_characters="\ufeff"), min_size=1, max_size=20
               ).map(str.strip).filter(bool)
records = st.builds(
    Record, id=st.from_regex(r"[A-Za-z0-9]{1,10}", fullmatch=True), title=text,
    abstract=st.just("") | text, language=st.sampled_from([None, "de", "en", "xx"]),
    type=st.sampled_from([None, "Book", "Thesis"]),
    subjects=st.lists(st.from_regex(r"[0-9]{3,7}-[0-9X]", fullmatch=True), max_size=3),
    domains=st.lists(st.sampled_from(["lit", "bio"]), max_size=2))
# a line that is never an item: an undecodable byte, a cut JSON object, or a non-record
garbage = st.one_of(
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"") + b"\xff"),
    st.builds(lambda v: json.dumps(v).encode()[:-1], json_objects.filter(bool)),
    st.sampled_from([b"[1, 2]", b'"text"', b"null", b'{"title": "no id"}', b"{}"]))


def _interleave(items: list[bytes], junk: list[bytes], where: list[int]) -> tuple[bytes, int]:
    lines = list(items)
    for j, pos in zip(junk, where, strict=False):
        lines.insert(min(pos, len(lines)), j)
    return b"\n".join(lines) + b"\n", min(len(junk), len(where))


def _collect(name: str, data: bytes, load: Callable[[Path, InputReport], Iterator]
             ) -> tuple[list, InputReport]:
    report = _quiet()
    return _with_file(name, data, lambda p: list(load(p, report))), report


def _check(name: str, items: list[bytes], junk: list[bytes], where: list[int],
           load: Callable[[Path, InputReport], Iterator]) -> tuple[list, InputReport]:
    data, n_junk = _interleave(items, junk, where)
    for gz in (False, True):
        got, report = _collect(name + (".gz" if gz else ""), gzip.compress(data) if gz
                               else data, load)
        assert report.n_skipped == n_junk, report.skipped
        yield got


@FUZZ
@given(recs=st.lists(records, max_size=8), junk=st.lists(garbage, max_size=5),
       where=st.lists(st.integers(0, 12), max_size=5))
def test_jsonl_records_survive_garbage_in_order(recs, junk, where):
    items = [json.dumps(r.to_json(), ensure_ascii=False).encode() for r in recs]
    for got in _check("r.jsonl", items, junk, where,
                      lambda p, rep: read_records(p, format="jsonl", report=rep)):
        assert got == recs


@FUZZ
@given(recs=st.lists(records, max_size=8), junk=st.lists(garbage, max_size=5),
       where=st.lists(st.integers(0, 12), max_size=5))
def test_predictions_survive_garbage_in_order(recs, junk, where):
    recs = list({r.id: r for r in recs}.values())  # a repeated id is (rightly) reported
    items = [json.dumps({"id": r.id, "subjects": r.subjects}).encode() for r in recs]
    junk = [j for j in junk if b'"id"' not in j]  # a cut object can't be a prediction
    for got in _check("p.jsonl", items, junk, where,
                      lambda p, rep: iter(read_predictions(p, rep).items())):
        assert got == [(r.id, r.subjects) for r in recs]


bad_bytes = st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"") + b"\xfe")


@FUZZ
@given(titles=st.lists(text.filter(lambda t: "\t" not in t), max_size=8),
       junk=st.lists(bad_bytes, max_size=5), where=st.lists(st.integers(0, 12), max_size=5))
def test_annif_tsv_records_survive_garbage_in_order(titles, junk, where):
    items = [f"{t}\t<http://d-nb.info/gnd/4015065-3>".encode() for t in titles]
    for got in _check("docs.tsv", items, junk, where,
                      lambda p, rep: read_records(p, format="annif-tsv", report=rep)):
        assert [(r.title, r.subjects) for r in got] == [(t, ["4015065-3"]) for t in titles]


def _vocab_loader(fmt: str) -> Callable[[Path, InputReport], Iterator]:
    return lambda p, rep: VOCAB_FORMATS[fmt](p, report=rep)


@FUZZ
@given(labels=st.lists(text.filter(lambda t: "\t" not in t), max_size=8),
       junk=st.lists(bad_bytes, max_size=5), where=st.lists(st.integers(1, 12), max_size=5))
def test_vocabulary_lines_survive_garbage_in_order(labels, junk, where):
    ids = [f"{i}-1" for i in range(len(labels))]
    gnd = [b"gnd_id\tlabel_de"] + [f"{i}\t{t}".encode() for i, t in zip(ids, labels,
                                                                          strict=True)]
    for got in _check("v.tsv", gnd, junk, where, _vocab_loader("gnd-tsv")):
        assert [(s.id, s.labels) for s in got] == [(i, {"de": t}) for i, t in zip(
            ids, labels, strict=True)]
    annif = [f"<http://d-nb.info/gnd/{i}>\t{t}".encode() for i, t in zip(ids, labels,
                                                                          strict=True)]
    for got in _check("v.tsv", annif, junk, where, _vocab_loader("annif-tsv")):
        assert [(s.id, s.labels) for s in got] == [(i, {"de": t}) for i, t in zip(
            ids, labels, strict=True)]
    yaml_items = [f'- id: "http://d-nb.info/gnd/{i}"\n  subject: {json.dumps(t)}'.encode()
                  for i, t in zip(ids, labels, strict=True)]
    for got in _check("v.yaml", yaml_items, junk, where, _vocab_loader("invenio-yaml")):
        assert [(s.id, s.labels) for s in got] == [(i, {"de": t}) for i, t in zip(
            ids, labels, strict=True)]


@FUZZ
@given(labels=st.lists(text, min_size=1, max_size=6), bad=st.sets(st.integers(0, 5)))
def test_gnd_json_entries_survive_broken_neighbours_in_order(labels, bad):
    entries = [{"Code": f"{i}-1", "Name": t} for i, t in enumerate(labels)]
    lines = [json.dumps(e, ensure_ascii=False).encode() for e in entries]
    bad = {b for b in bad if b < len(lines)}
    for b in bad:  # one undecodable byte breaks that entry only
        lines[b] = lines[b].replace(b'"Name"', b'"Na\xffme"')
    data = b"[\n" + b",\n".join(lines) + b"\n]\n"
    report = _quiet()
    got = _with_file("v.json", data, lambda p: list(VOCAB_FORMATS["gnd-json"](p, report=report)))
    keep = [e for i, e in enumerate(entries) if i not in bad]
    assert [(s.id, s.labels["de"]) for s in got] == [(e["Code"], e["Name"]) for e in keep]
    assert report.n_skipped >= len(bad)


@FUZZ
@given(labels=st.lists(text, min_size=1, max_size=6), bad=st.sets(st.integers(0, 5)))
def test_skos_statements_survive_broken_neighbours(labels, bad):
    lines = [f'<http://d-nb.info/gnd/{i}-1> <http://www.w3.org/2004/02/skos/core#prefLabel> '
             f'{json.dumps(t, ensure_ascii=False)}@de .'.encode() for i, t in enumerate(labels)]
    bad = {b for b in bad if b < len(lines)}
    for b in bad:
        lines[b] = lines[b].replace(b"> <", b"> ;; <")  # a syntax error in that statement
    report = _quiet()
    got = _with_file("v.nt", b"\n".join(lines) + b"\n",
                     lambda p: list(VOCAB_FORMATS["skos"](p, report=report)))
    keep = {f"{i}-1": t for i, t in enumerate(labels) if i not in bad}
    assert {s.id: s.labels["de"] for s in got} == keep  # SKOS has no order: sorted by id
    assert report.n_skipped == len(bad)


def test_known_nasty_inputs_never_raise():
    wic = b'{"sentence1": "abc", "sentence2": "abc", "start1": Infinity, "end1": 2}'
    for data in [b"[" * 100_000, b"{" * 50_000, wic, b'{"id": NaN, "title": 1e999}',
                 b"\xef\xbb\xbf", b"\x00" * 64, b"\r" * 10, b"\x1f\x8b",
                 b"\x1f\x8b\x08" + b"\0" * 7,
                 b'- id: "x"\n  subject: [1, 2]\n- id: {a: b}\n  subject: "\\ud800"\n']:
        _load_everything(data, gz=False)


# MARC (issue 32): records written by tagalign's own writer, garbage between them

def _marc_records(recs: list[Record]) -> list[Record]:
    from dataclasses import replace

    # MARC carries no domains; a title's closing " /" is ISBD punctuation, not title; a
    # subject given twice is one subject
    return [replace(r, domains=[], title=r.title.removesuffix("/").rstrip() or "t",
                    subjects=list(dict.fromkeys(r.subjects)))
            for r in {r.id: r for r in recs}.values()]


@FUZZ
@given(recs=st.lists(records, max_size=8), junk=st.lists(st.binary(max_size=30), max_size=5),
       where=st.lists(st.integers(0, 12), max_size=5))
def test_binary_marc_records_survive_garbage_in_order(recs, junk, where):
    from tagalign.records.marc.writer import marc_bytes, record_to_marc

    recs = _marc_records(recs)
    items = [marc_bytes(record_to_marc(r), "marc") for r in recs]
    # garbage ends at an end-of-record mark, as a broken record does; blank bits are filler
    junk = [j.replace(b"\x1d", b"") + b"\x1d" for j in junk]
    data, _ = _interleave(items, junk, where)
    for gz in (False, True):
        got, report = _collect("r.mrc", gzip.compress(data) if gz else data,
                               lambda p, rep: read_records(p, format="marc", report=rep))
        assert got == recs
        assert report.n_skipped <= min(len(junk), len(where))


xml_junk = st.text(st.sampled_from(list("<>/= abc&;\n")), max_size=20)


@FUZZ
@given(recs=st.lists(records, max_size=6), junk=st.lists(xml_junk, max_size=5),
       where=st.lists(st.integers(0, 12), max_size=5))
def test_marc_xml_records_survive_garbage_in_order(recs, junk, where):
    from tagalign.records.marc.writer import XML_HEAD, XML_TAIL, marc_bytes, record_to_marc

    recs = _marc_records(recs)
    items = [marc_bytes(record_to_marc(r), "marcxml").rstrip() for r in recs]
    data, _ = _interleave(items, [j.encode() for j in junk], where)
    for gz in (False, True):
        got, _ = _collect("r.xml", gzip.compress(XML_HEAD + data + XML_TAIL) if gz
                          else XML_HEAD + data + XML_TAIL,
                          lambda p, rep: read_records(p, format="marc", report=rep))
        assert got == recs
