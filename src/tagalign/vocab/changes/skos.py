"""A SKOS vocabulary (a thesaurus release as YSO or STW publish them) read as `Change`s.

A concept the release keeps is a `Heading`; a deprecated one (``owl:deprecated true``) says
where it went with ``dct:isReplacedBy`` (YSO: ``dct:isReplacedBy`` on about a thousand
deprecated concepts; STW: the pattern J. Neubert proposed on public-lod, 2010-03, "Out of use,
please use B": ``owl:deprecated true`` + ``dcterms:isReplacedBy <B>``; Skosmos' data model
reads the same): one successor → `Redirected` (to it, named by its preferred label where the
file has it), several → `Split`, none → `Deleted`. The concept scheme and collections are no
headings (`tagalign.vocab.skos.concept_nodes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from tagalign.io import Reporter
from tagalign.vocab.changes.model import Change, Deleted, Heading, Redirected, Split
from tagalign.vocab.changes.read import register_reader
from tagalign.vocab.skos import concept_nodes, is_deprecated, read_graph, to_subject
from tagalign.vocab.subject import normalize_subject_id

DCT_IS_REPLACED_BY = "http://purl.org/dc/terms/isReplacedBy"


@register_reader
class SkosChanges:
    """Headings and deprecations of a SKOS file (Turtle, RDF/XML, N-Triples)."""

    name: ClassVar[str] = "skos"

    def read(self, path: Path, report: Reporter) -> Iterator[Change]:
        from rdflib import URIRef
        from rdflib.namespace import OWL, RDF, SKOS

        path = Path(path)
        graph, _ = read_graph(path, report)
        where = str(path)
        for node in concept_nodes(graph)[0]:
            subject = to_subject(graph, node)
            if subject is not None:
                yield Heading(id=subject.id, subject=subject, where=where)
        replaced_by = URIRef(DCT_IS_REPLACED_BY)
        deprecated = {n for n in graph.subjects(OWL.deprecated, None)
                      if isinstance(n, URIRef) and is_deprecated(graph, n)
                      and (n, RDF.type, SKOS.ConceptScheme) not in graph}
        for node in sorted(deprecated):
            sid = normalize_subject_id(str(node))
            targets = {normalize_subject_id(str(t)): t for t in graph.objects(node, replaced_by)}
            targets.pop(sid, None)
            if len(targets) == 1:
                [(target, uri)] = targets.items()
                label = next((str(lit) for lit in graph.objects(uri, SKOS.prefLabel)), None)
                yield Redirected(id=sid, target=target, target_label=label, where=where)
            elif targets:
                yield Split(id=sid, targets=tuple(sorted(targets)), where=where,
                            note="deprecated, replaced by several concepts")
            else:
                yield Deleted(id=sid, where=where, note="deprecated without a replacement")
