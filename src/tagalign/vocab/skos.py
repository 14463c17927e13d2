"""SKOS vocabularies (Turtle, RDF/XML, N-Triples) via rdflib: prefLabel/altLabel per
language, broader/narrower/related, definition; deprecated concepts and the concept scheme
are no subjects (`concept_nodes`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tagalign.io import Reporter, read_text_lenient
from tagalign.vocab.loaders import default_report, register
from tagalign.vocab.subject import Subject, normalize_subject_id

log = logging.getLogger(__name__)
_FORMATS = {".ttl": "turtle", ".rdf": "xml", ".xml": "xml", ".owl": "xml", ".nt": "nt"}


def _why(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):  # rdflib: "at line 2 of <>:" + the reason
        lines = lines[1:]
    return (lines[0] if lines else type(exc).__name__)[:200]


def _statements(text: str) -> tuple[list[str], list[tuple[int, str]]]:
    """Turtle/N-Triples text as (prefix lines, ``(first line, statement)`` blocks): a block
    ends at a line ending with ``.``, which is how SKOS dumps are written."""
    prefixes: list[str] = []
    blocks: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        bare = line.strip()
        if not current and bare.lower().startswith(("@prefix", "@base", "prefix ", "base ")):
            prefixes.append(line)
            continue
        if not current and (not bare or bare.startswith("#")):
            continue
        if not current:
            start = lineno
        current.append(line)
        if bare.endswith("."):
            blocks.append((start, "\n".join(current)))
            current = []
    if current:
        blocks.append((start, "\n".join(current)))
    return prefixes, blocks


def _recover(text: str, fmt: str, path: Path, report: Reporter):
    """Parse a damaged Turtle/N-Triples file statement by statement (groups are halved
    until the bad statements are isolated, so a clean stretch costs one parse)."""
    from rdflib import Graph

    graph = Graph()
    prefixes, blocks = _statements(text)
    head = "\n".join(prefixes) + "\n"

    def parse(group: list[tuple[int, str]]) -> None:
        part = Graph()
        try:
            part.parse(data=head + "\n".join(b for _, b in group), format=fmt)
        except Exception as exc:  # noqa: BLE001 - rdflib raises many types for bad syntax
            if len(group) == 1:
                report.bad(f"{path}:{group[0][0]}", _why(exc))
                return
            mid = len(group) // 2
            parse(group[:mid])
            parse(group[mid:])
            return
        for triple in part:
            graph.add(triple)

    for i in range(0, len(blocks), 2000):
        parse(blocks[i:i + 2000])
    return graph


def read_graph(path: Path, report: Reporter):
    """The RDF graph of a SKOS file and the line reader that decoded it (its ``finish``
    reports the count): decoded per line (undecodable lines reported); a file with syntax
    errors is parsed statement by statement (Turtle, N-Triples), so only the bad statements
    are lost."""
    from rdflib import Graph

    suffix = Path(path.name.removesuffix(".gz")).suffix.lower()
    fmt = _FORMATS.get(suffix, "turtle")
    text, reader = read_text_lenient(path, report)
    graph = Graph()
    try:
        graph.parse(data=text, format=fmt)
    except Exception as exc:  # noqa: BLE001 - rdflib raises many types for bad syntax
        if fmt == "xml":
            report.bad(str(path), _why(exc))
        else:
            graph = _recover(text, fmt, path, report)
    return graph, reader


def is_deprecated(graph, node) -> bool:
    """``owl:deprecated true`` on ``node``: how YSO and STW mark a concept that is no longer
    used (with ``dct:isReplacedBy`` naming its successors, where it has any; the SKOS
    community's convention, J. Neubert on public-lod 2010-03, Skosmos' data model)."""
    from rdflib.namespace import OWL

    return any(str(o).strip().lower() in ("true", "1") for o in graph.objects(node, OWL.deprecated))


def concept_nodes(graph) -> tuple[list, Counter[str]]:
    """The concepts a vocabulary keeps, sorted, and what was left out by kind: a node typed
    ``skos:Concept`` or one with a ``skos:prefLabel`` (files that leave out the types), but
    not the ``skos:ConceptScheme`` or a ``skos:Collection`` (they carry a prefLabel too: the
    thesaurus's name, a group's), and not a deprecated concept (`is_deprecated`): as in
    Annif (``annif/vocab/skos.py`` skips ``owl:deprecated true`` concepts) and Skosmos, a
    deprecated concept is no subject to suggest. Its successors are read as changes
    (`tagalign.vocab.changes.skos`), which is where a project learns where it went."""
    from rdflib import URIRef
    from rdflib.namespace import RDF, SKOS

    skipped: Counter[str] = Counter()
    typed = set(graph.subjects(RDF.type, SKOS.Concept))
    others = set(graph.subjects(RDF.type, SKOS.ConceptScheme)) | set(
        graph.subjects(RDF.type, SKOS.Collection)) | set(
        graph.subjects(RDF.type, SKOS.OrderedCollection))
    kept = []
    for node in sorted(c for c in typed | set(graph.subjects(SKOS.prefLabel, None))
                       if isinstance(c, URIRef)):
        if node in others and node not in typed:
            skipped["concept schemes and collections"] += 1
        elif is_deprecated(graph, node):
            skipped["deprecated concepts"] += 1
        else:
            kept.append(node)
    return kept, skipped


def to_subject(graph, node) -> Subject | None:
    """The `Subject` of one concept: its labels per language, broader/narrower/related and
    definition; None for one without a preferred label."""
    from rdflib import Literal
    from rdflib.namespace import SKOS

    labels: dict[str, str] = {}
    alts: dict[str, list[str]] = {}
    for lit in graph.objects(node, SKOS.prefLabel):
        if isinstance(lit, Literal):
            labels.setdefault(lit.language or "de", str(lit))
    for lit in graph.objects(node, SKOS.altLabel):
        if isinstance(lit, Literal):
            alts.setdefault(lit.language or "de", []).append(str(lit))
    if not labels:
        return None
    definition = next((str(d) for d in graph.objects(node, SKOS.definition)), None)

    def ids(pred):
        return sorted(normalize_subject_id(str(o)) for o in graph.objects(node, pred))

    return Subject(normalize_subject_id(str(node)), labels, alts, ids(SKOS.broader),
                   ids(SKOS.narrower), ids(SKOS.related), definition=definition)


@register("skos")
def load_skos(path: Path, report: Reporter | None = None) -> Iterator[Subject]:
    """The concepts of a SKOS file (`concept_nodes`: deprecated ones, the concept scheme and
    collections left out, and logged), read as `read_graph` reads it."""
    path = Path(path)
    graph, reader = read_graph(path, default_report(report))
    nodes, skipped = concept_nodes(graph)
    if skipped:
        log.info("%s: left out %s", path.name,
                 ", ".join(f"{n} {kind}" for kind, n in skipped.items()))
    n = 0
    for node in nodes:
        subject = to_subject(graph, node)
        if subject is not None:
            n += 1
            yield subject
    reader.finish(n, "subjects")
