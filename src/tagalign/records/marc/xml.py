"""MARC-XML read as a stream: a ``<collection>``, an SRU ``searchRetrieveResponse``
(``records/record/recordData/record``), or records in any other wrapper.

Why not pymarc's XML reader: `pymarc.parse_xml_to_array` holds every record, and
`pymarc.marcxml.parse_xml` runs over SAX, which stops for good at the first broken tag and
knows no byte position to start again from. This reader drives expat itself (the parser
behind both): records are built as their end tags arrive and handed on at once, so memory
stays flat; when expat meets broken XML, the record it was in is reported by file and line
and skipped, and a fresh parser starts at the next record's start tag, inside the same
wrapper elements (re-opened, so the file's closing tags still match): the rest is kept.
Elements are matched by local name (``marc:record`` and ``record`` alike, namespaced or not);
a ``record`` element counts as a MARC record once it holds a leader or a field, so SRU's own
``record`` wrapper is looked through. Expat resolves no external entity.
"""

from __future__ import annotations

import gzip
import re
import xml.parsers.expat as expat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pymarc import Field, Indicators, Leader, Subfield
from pymarc import Record as MarcRecord

from tagalign.io import Reporter
from tagalign.records.marc.binary import BLOCK, MarcItem

_TAG = re.compile(r"^[0-9A-Za-z]{3}$")
_ANY_RECORD = re.compile(rb"<(?:[A-Za-z_][\w.\-]*:)?record[\s>/]")


def _local(qname: str) -> str:
    return qname.rpartition(":")[2]


class _Builder:
    """Expat's element handlers: pymarc records out of MARC-XML elements, each handed to
    `done` (line it starts on, record, first problem in it or None) when its end tag comes."""

    def __init__(self, parser, line_base: int):
        self.parser = parser
        self.line_base = line_base
        self.stack: list[str] = []  # qualified names of the open elements
        self.outer: tuple[tuple[str, ...], str] | None = None  # (ancestors, name) of a record
        self.record: MarcRecord | None = None
        self.depth = self.line = 0
        self.content = False
        self.error: str | None = None
        self.field: Field | None = None
        self.tag: str | None = None
        self.code: str | None = None
        self.text: list[str] | None = None
        self.done: list[tuple[int, MarcRecord, str | None]] = []
        parser.buffer_text = True
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        parser.CharacterDataHandler = self.chars

    def start(self, name: str, attrs: dict[str, str]) -> None:
        self.stack.append(name)
        local = _local(name)
        if local == "record":
            if not any(_local(q) == "record" for q in self.stack[:-1]):
                self.outer = (tuple(self.stack[:-1]), name)
            self.record, self.depth, self.content, self.error = MarcRecord(), len(
                self.stack), False, None
            self.line = self.line_base + self.parser.CurrentLineNumber
            return
        if self.record is None:
            return
        if local == "subfield":
            self.code, self.text = attrs.get("code"), []
            if not self.code or len(self.code) != 1:
                self._fail(f"subfield code {self.code!r} is not one character")
        elif local == "datafield":
            self.content = True
            tag, ind1, ind2 = attrs.get("tag", ""), attrs.get("ind1", " "), attrs.get("ind2", " ")
            if not _TAG.match(tag):
                self._fail(f"datafield tag {tag!r} is not three letters or digits")
            if len(ind1) > 1 or len(ind2) > 1:
                self._fail(f"indicators {ind1!r}, {ind2!r} are not one character each")
            self.field = Field(tag or "???", Indicators(ind1 or " ", ind2 or " "))
        elif local == "controlfield":
            self.content, self.tag, self.text = True, attrs.get("tag", ""), []
            if not _TAG.match(self.tag):
                self._fail(f"controlfield tag {self.tag!r} is not three letters or digits")
        elif local == "leader":
            self.content, self.text = True, []

    def _fail(self, why: str) -> None:
        self.error = self.error or why

    def chars(self, data: str) -> None:
        if self.text is not None:
            self.text.append(data)

    def end(self, name: str) -> None:
        self.stack.pop()
        if self.record is None:
            return
        local = _local(name)
        text = "".join(self.text) if self.text is not None else ""
        self.text = None
        if local == "subfield":
            if self.field is not None and self.code:
                self.field.subfields.append(Subfield(self.code, text))
        elif local == "datafield":
            if self.field is not None:
                self.record.fields.append(self.field)
            self.field = None
        elif local == "controlfield":
            self.record.fields.append(Field(self.tag or "???", data=text))
        elif local == "leader":
            if len(text) != 24:
                self._fail(f"leader has {len(text)} characters, not 24")
            else:
                self.record.leader = Leader(text)
        elif local == "record" and len(self.stack) + 1 == self.depth:
            if self.content:  # else a wrapper whose MARC record was handed on already
                self.done.append((self.line, self.record, self.error))
            self.record = None


class XmlReader:
    """Iterate the MARC records of one MARC-XML stream (see the module docstring)."""

    def __init__(self, fh: IO[bytes], path: Path, report: Reporter):
        self.fh, self.path, self.report = fh, path, report
        self.n = self.good = 0
        self.window = b""  # the last two blocks read: where a restart point is searched
        self.window_at = 0  # offset of window[0] in the stream
        self.lines_before = 0  # line breaks before window[0]
        self.encoding: str | None = None
        self.searching: int | None = None  # after broken XML: look for a record from here
        self._start(0, 0, b"")

    def _start(self, origin: int, line_base: int, prologue: bytes) -> None:
        self.parser = expat.ParserCreate(encoding=self.encoding)
        self.parser.XmlDeclHandler = self._declared
        self.builder = _Builder(self.parser, line_base)
        self.origin, self.prologue = origin, len(prologue)
        if prologue:
            self.parser.Parse(prologue, False)

    def _declared(self, version: str, encoding: str | None, standalone: int) -> None:
        self.encoding = self.encoding or encoding

    def __iter__(self) -> Iterator[MarcItem]:
        while True:
            try:
                # open_binary's file: a GzipFile or BufferedReader, both with read1 (typeshed's
                # IO[bytes] has none)
                block = self.fh.read1(BLOCK)  # type: ignore[attr-defined]  # what came before a cut too
            except EOFError:
                self.report.bad(str(self.path), f"compressed data ends early after "
                                                f"{self.good} records")
                return
            except (gzip.BadGzipFile, zlib.error) as exc:
                self.report.bad(str(self.path), f"compressed data is corrupt ({exc}) after "
                                                f"{self.good} records")
                return
            if not block:
                break
            dropped = self.window[:max(0, len(self.window) - BLOCK)]
            self.lines_before += dropped.count(b"\n")
            self.window_at += len(dropped)
            self.window = self.window[len(dropped):] + block
            yield from self._feed(block if self.searching is None
                                  else self._restart(self.searching))
        if self.searching is None:
            try:
                self.parser.Parse(b"", True)
            except expat.ExpatError as exc:
                yield from self._drain()
                self._at_end(exc)
        yield from self._drain()

    def _feed(self, data: bytes) -> Iterator[MarcItem]:
        while data:
            try:
                self.parser.Parse(data, False)
            except expat.ExpatError as exc:
                yield from self._drain()
                at = self.origin + max(self.parser.ErrorByteIndex - self.prologue, 0)
                self._broken(exc)
                # the next record may start right where the error is (a tag left open just
                # before it); a fresh parser cannot fail at its own start, so no loop
                self.searching = at if at > self.origin else at + 1
                data = self._restart(self.searching)
                continue
            yield from self._drain()
            return

    def _restart(self, searching: int) -> bytes:
        """A fresh parser at the next record's start tag after ``searching``, fed the open
        wrapper elements first; returns the bytes to feed it (b"": not in the window yet)."""
        outer = self.builder.outer
        pattern = re.compile(b"<" + re.escape(outer[1].encode()) + rb"[\s>/]") if outer \
            else _ANY_RECORD
        m = pattern.search(self.window, max(searching - self.window_at, 0))
        if m is None:
            return b""
        ancestors = outer[0] if outer else ()
        line_base = self.lines_before + self.window.count(b"\n", 0, m.start())
        self._start(self.window_at + m.start(), line_base,
                    b"".join(b"<" + q.encode() + b">" for q in ancestors))
        self.builder.outer = outer
        self.searching = None
        return self.window[m.start():]

    def _drain(self) -> Iterator[MarcItem]:
        for line, record, error in self.builder.done:
            self.n += 1
            where = f"{self.path}:{line}: record {self.n}"
            if error is not None:
                self.report.bad(where, error)
                continue
            self.good += 1
            yield MarcItem(self.n, where, record)
        self.builder.done.clear()

    def _line(self, exc: expat.ExpatError) -> int:
        return self.builder.line_base + exc.lineno

    def _broken(self, exc: expat.ExpatError) -> None:
        why = expat.ErrorString(exc.code)
        if self.builder.record is not None:
            self.n += 1
            self.report.bad(f"{self.path}:{self.builder.line}: record {self.n}",
                            f"broken XML ({why} at line {self._line(exc)}, column "
                            f"{exc.offset + 1}): skipped")
        else:
            self.report.bad(f"{self.path}:{self._line(exc)}",
                            f"broken XML ({why}, column {exc.offset + 1}): skipped to the next "
                            "record")

    def _at_end(self, exc: expat.ExpatError) -> None:
        b = self.builder
        if b.record is not None:
            self.n += 1
            self.report.bad(f"{self.path}:{b.line}: record {self.n}",
                            "cut off: the file ends inside it")
        elif b.stack:
            self.report.bad(str(self.path), f"the XML ends early (<{b.stack[0]}> is not "
                                            f"closed) after {self.good} records")
        else:
            self.report.bad(f"{self.path}:{self._line(exc)}",
                            f"broken XML ({expat.ErrorString(exc.code)})")
