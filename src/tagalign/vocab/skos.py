"""SKOS vocabularies (Turtle, RDF/XML, N-Triples) via rdflib: prefLabel/altLabel per
language, broader/narrower/related, definition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tagalign.vocab.loaders import register
from tagalign.vocab.subject import Subject, normalize_subject_id

_FORMATS = {".ttl": "turtle", ".rdf": "xml", ".xml": "xml", ".owl": "xml", ".nt": "nt"}


@register("skos")
def load_skos(path: Path) -> Iterator[Subject]:
    import gzip

    from rdflib import Graph, Literal, URIRef
    from rdflib.namespace import RDF, SKOS

    path = Path(path)
    suffix = Path(path.name.removesuffix(".gz")).suffix.lower()
    graph = Graph()
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    else:
        data = path.read_bytes()
    graph.parse(data=data, format=_FORMATS.get(suffix, "turtle"))
    concepts = set(graph.subjects(RDF.type, SKOS.Concept)) | set(
        graph.subjects(SKOS.prefLabel, None))
    for node in sorted(c for c in concepts if isinstance(c, URIRef)):
        labels: dict[str, str] = {}
        alts: dict[str, list[str]] = {}
        for lit in graph.objects(node, SKOS.prefLabel):
            if isinstance(lit, Literal):
                labels.setdefault(lit.language or "de", str(lit))
        for lit in graph.objects(node, SKOS.altLabel):
            if isinstance(lit, Literal):
                alts.setdefault(lit.language or "de", []).append(str(lit))
        if not labels:
            continue
        definition = next((str(d) for d in graph.objects(node, SKOS.definition)), None)

        def ids(pred, node=node):
            return sorted(normalize_subject_id(str(o)) for o in graph.objects(node, pred))

        yield Subject(normalize_subject_id(str(node)), labels, alts, ids(SKOS.broader),
                      ids(SKOS.narrower), ids(SKOS.related), definition=definition)
