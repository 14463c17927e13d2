"""Vocabulary loaders on faithful excerpts of each format, and the saved fast form."""

from __future__ import annotations

import json

import pytest

from tagalign.vocab import (
    Vocabulary,
    VocabularyMismatchError,
    load_vocabulary,
    normalize_subject_id,
)
from tagalign.vocab.invenio import invenio_yaml_path, load_invenio_yaml


@pytest.mark.parametrize("raw", ["gnd:4015065-3", "http://d-nb.info/gnd/4015065-3",
                                 "https://d-nb.info/gnd/4015065-3", "<https://d-nb.info/gnd/4015065-3>",
                                 " 4015065-3 "])
def test_ids_normalise(raw):
    assert normalize_subject_id(raw) == "4015065-3"


def test_gnd_tsv_real_file(gnd_vocab):
    assert len(gnd_vocab) == 204_569
    assert sum("en" in s.labels for s in gnd_vocab) == 78_394
    assert gnd_vocab["4015065-3"].label("de") == "Epos"


def test_saved_form_round_trip(gnd_vocab, tmp_path):
    path = gnd_vocab.save(tmp_path)
    back = Vocabulary.load(path)
    assert back.fingerprint == gnd_vocab.fingerprint and len(back) == len(gnd_vocab)
    assert back["4015065-3"].labels == gnd_vocab["4015065-3"].labels
    assert load_vocabulary(tmp_path).ids[:5] == gnd_vocab.ids[:5]


def test_mismatched_vocabulary_is_refused(gnd_vocab):
    small = Vocabulary(list(gnd_vocab)[:10])
    with pytest.raises(VocabularyMismatchError, match="another vocabulary"):
        small.check(gnd_vocab.fingerprint, len(gnd_vocab), "model X")


def test_gnd_json(tmp_path):
    path = tmp_path / "GND-Subjects-tib-core.json"
    path.write_text(json.dumps([
        {"Code": "4015065-3", "Classification Number": "12.3",
         "Classification Name": "Literatur", "Name": "Epos",
         "Alternate Name": ["Epen", "Heldenepos"], "Related Subjects": ["Heldendichtung"],
         "Definition": "Erzählende Versdichtung"},
        {"Code": "gnd:4123065-6", "Name": "Digitalisierung", "Alternate Name": [],
         "Related Subjects": [{"Code": "4015065-3"}], "Classification Number": "",
         "Classification Name": "", "Definition": ""}]), encoding="utf-8")
    vocab = load_vocabulary(path)
    epos = vocab["4015065-3"]
    assert epos.labels == {"de": "Epos"} and epos.alt_labels == {"de": ["Epen", "Heldenepos"]}
    assert epos.classification == [("12.3", "Literatur")]
    assert epos.definition == "Erzählende Versdichtung"
    assert vocab["4123065-6"].related == ["4015065-3"]


TTL = """@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
<https://d-nb.info/gnd/4015065-3> a skos:Concept ;
    skos:prefLabel "Epos"@de, "Epic poetry"@en ;
    skos:altLabel "Heldenepos"@de ;
    skos:broader <https://d-nb.info/gnd/4035964-5> ;
    skos:related <http://d-nb.info/gnd/4024729-6> .
<https://d-nb.info/gnd/4035964-5> a skos:Concept ; skos:prefLabel "Literatur"@de .
"""

RDFXML = """<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
         xmlns:skos="http://www.w3.org/2004/02/skos/core#">
  <skos:Concept rdf:about="http://d-nb.info/gnd/4015065-3">
    <skos:prefLabel xml:lang="de">Epos</skos:prefLabel>
    <skos:prefLabel xml:lang="en">Epic poetry</skos:prefLabel>
    <skos:narrower rdf:resource="http://d-nb.info/gnd/4159230-5"/>
  </skos:Concept>
</rdf:RDF>
"""


def test_skos_turtle_and_rdfxml(tmp_path):
    (tmp_path / "v.ttl").write_text(TTL, encoding="utf-8")
    v = load_vocabulary(tmp_path / "v.ttl")
    epos = v["4015065-3"]
    assert epos.labels == {"de": "Epos", "en": "Epic poetry"}
    assert epos.alt_labels == {"de": ["Heldenepos"]}
    assert epos.broader == ["4035964-5"] and epos.related == ["4024729-6"]
    assert len(v) == 2
    (tmp_path / "v.rdf").write_text(RDFXML, encoding="utf-8")
    v = load_vocabulary(tmp_path / "v.rdf")
    assert v["4015065-3"].label("en") == "Epic poetry"
    assert v["4015065-3"].narrower == ["4159230-5"]


def test_annif_tsv(tmp_path):
    path = tmp_path / "subjects.tsv"
    path.write_text("<http://d-nb.info/gnd/4015065-3>\tEpos\n"
                    "<https://d-nb.info/gnd/4123065-6>\tDigitalisierung\t12.3\n")
    v = load_vocabulary(path)
    assert v.ids == ["4015065-3", "4123065-6"]
    assert v["4123065-6"].classification == [("12.3", "")]


def test_invenio_yaml_excerpt_and_bundled(tmp_path):
    path = tmp_path / "subjects_gnd.yaml"
    path.write_text('- id: "http://d-nb.info/gnd/4015065-3"\n  scheme: GND\n'
                    '  subject: "Epos"\n- id: "http://d-nb.info/gnd/1-2"\n  scheme: GND\n'
                    '  subject: "Caf\\u00e9 \\"Zentral\\""\n', encoding="utf-8")
    subjects = list(load_invenio_yaml(path))
    assert [(s.id, s.labels["de"]) for s in subjects] == [("4015065-3", "Epos"),
                                                          ("1-2", 'Café "Zentral"')]
    assert load_vocabulary(path).ids == ["4015065-3", "1-2"]
    assert invenio_yaml_path().exists()


def test_unknown_format_is_a_clear_error(tmp_path):
    path = tmp_path / "v.bin"
    path.write_bytes(b"\x00")
    with pytest.raises(ValueError, match="cannot tell the vocabulary format"):
        load_vocabulary(path)
    with pytest.raises(FileNotFoundError):
        load_vocabulary(tmp_path / "missing.tsv")


def test_languages_most_used_first_counted_once(tmp_path):
    """The label languages, the most used first, counted once per vocabulary (the Annif
    ``/v1/projects`` answer asks at every request; a 1.5M-heading vocabulary took a second
    to count): a second call does not walk the subjects, and a caller's change to the
    list it got does not change the next answer. A loaded vocabulary counts them too."""
    from tagalign.vocab import Subject, Vocabulary

    vocab = Vocabulary([Subject("a", {"en": "A"}), Subject("b", {"de": "B", "en": "B"}),
                        Subject("c", {"de": "C", "en": "C", "fr": "C"})])
    assert vocab.languages == ["en", "de", "fr"]
    loaded = Vocabulary.load(vocab.save(tmp_path / "v"))
    assert loaded.languages == ["en", "de", "fr"]
    for v in (vocab, loaded):
        v.subjects = []  # not walked again
        got = v.languages
        got.append("xx")
        assert v.languages == ["en", "de", "fr"]
