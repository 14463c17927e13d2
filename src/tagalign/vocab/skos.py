"""SKOS vocabularies (Turtle, RDF/XML, N-Triples) via rdflib: prefLabel/altLabel per
language, broader/narrower/related, definition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tagalign.io import Reporter, read_text_lenient
from tagalign.vocab.loaders import default_report, register
from tagalign.vocab.subject import Subject, normalize_subject_id

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


@register("skos")
def load_skos(path: Path, report: Reporter | None = None) -> Iterator[Subject]:
    """Decoded per line (undecodable lines reported); a file with syntax errors is parsed
    statement by statement (Turtle, N-Triples) so only the bad statements are lost."""
    from rdflib import Graph, Literal, URIRef
    from rdflib.namespace import RDF, SKOS

    path = Path(path)
    report = default_report(report)
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
    n = 0
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

        n += 1
        yield Subject(normalize_subject_id(str(node)), labels, alts, ids(SKOS.broader),
                      ids(SKOS.narrower), ids(SKOS.related), definition=definition)
    reader.finish(n, "subjects")
