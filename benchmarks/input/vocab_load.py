#!/usr/bin/env python
"""Vocabulary load times: the GND TSV, the saved fast form, the bundled invenio YAML, and a
generated GND authority dump (MARC-XML, gzipped) of the Sachbegriff dump's size: read once
keeping nothing (the streaming's own memory), then loaded as a vocabulary.

``--authority-only`` runs only the last row (in a fresh process, for its peak RSS)."""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymarc

from benchmarks._common import DATA, peak_rss_gb
from tagalign.io import InputReport
from tagalign.vocab import Vocabulary, load_vocabulary
from tagalign.vocab.gnd_marc import read_authorities
from tagalign.vocab.loaders import load_invenio_gnd

#: records in the DNB's Sachbegriff dump (about as many as subjects in gnd-subjects.tsv.gz)
AUTHORITY_RECORDS = 205_000
SAMPLE = DATA / "gnd-marc" / "gnd-sachbegriff-sample.mrc.xml"


def timed(label, fn):
    t0 = time.perf_counter()
    value = fn()
    print(f"{label:<40}{time.perf_counter() - t0:7.2f} s")
    return value


def _set(field: pymarc.Field, code: str, value: str) -> None:
    field.subfields = [pymarc.Subfield(c, value if c == code else v)
                       for c, v in field.subfields]


def write_authority_dump(path: Path, n: int = AUTHORITY_RECORDS) -> Path:
    """``n`` records shaped like the four of the real sample (cycled), each with a new id,
    label and two alternative labels (450, which the sample lacks), broader terms pointing
    at earlier generated records; written with pymarc's XMLWriter, gzipped as the DNB
    ships it."""
    templates = pymarc.parse_xml_to_array(str(SAMPLE))
    with gzip.open(path, "wb", compresslevel=6) as fh:
        writer = pymarc.XMLWriter(fh)
        for i in range(n):
            rec = templates[i % len(templates)]
            gid = f"9{i:07d}-{i % 10}"
            rec["001"].data = f"9{i:08d}"
            _set(rec["024"], "a", gid)
            for f in rec.get_fields("035"):
                if f.get("a", "").startswith("(DE-588)"):
                    _set(f, "a", f"(DE-588){gid}")
            label = f"{rec['150']['a'].split(' #')[0]} #{i}"
            _set(rec["150"], "a", label)
            rec.remove_fields("450")
            for alt in (f"Variante {i}", f"Anderer Name {i}"):
                rec.add_ordered_field(pymarc.Field("450", pymarc.Indicators(" ", " "),
                                                   [pymarc.Subfield("a", alt)]))
            for f in rec.get_fields("550"):
                up = f"9{i // 2:07d}-{(i // 2) % 10}"
                f.subfields = [pymarc.Subfield("0", f"(DE-588){up}") if c == "0"
                               and v.startswith("(DE-588)") else pymarc.Subfield(c, v)
                               for c, v in f.subfields]
            writer.write(rec)
        writer.close(close_fh=False)
    return path


def authority_row(path: Path) -> None:
    base = peak_rss_gb()
    t0 = time.perf_counter()
    n = sum(1 for _ in read_authorities(path, InputReport()))  # subjects made, then dropped
    print(f"{'  stream it, keep nothing':<40}{time.perf_counter() - t0:7.2f} s   "
          f"{n:,} subjects; peak RSS {peak_rss_gb():.2f} GB ({base:.2f} GB before)")
    t0, c0 = time.perf_counter(), time.process_time()
    vocab = load_vocabulary(path)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    alts = sum(len(a) for s in vocab for a in s.alt_labels.values())
    # records per CPU second too: on a shared machine the wall clock says more about the
    # neighbours than about the loader
    print(f"{'load GND authority dump (.mrc.xml.gz)':<40}{took:7.2f} s   "
          f"{len(vocab) / took:,.0f} records/s ({len(vocab) / cpu:,.0f} per CPU second), "
          f"peak RSS {peak_rss_gb():.2f} GB")
    print(f"  {len(vocab)} subjects, {alts} alternative labels, "
          f"{sum(len(s.broader) for s in vocab)} broader links")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--authority-only", action="store_true")
    ap.add_argument("--authority-file", type=Path, help=argparse.SUPPRESS)  # the child
    args = ap.parse_args()
    if args.authority_file:
        authority_row(args.authority_file)
        return
    if not args.authority_only:
        vocab = timed("load gnd-subjects.tsv.gz", lambda: load_vocabulary(
            DATA / "gnd" / "gnd-subjects.tsv.gz"))
        print(f"  {len(vocab)} subjects, "
              f"{sum('en' in s.labels for s in vocab)} with English labels")
        with tempfile.TemporaryDirectory() as tmp:
            timed("save fast form", lambda: vocab.save(Path(tmp)))
            back = timed("load saved fast form (target < 3 s)",
                         lambda: Vocabulary.load(Path(tmp)))
            assert back.fingerprint == vocab.fingerprint
        inv = timed("load invenio-subjects-gnd YAML", load_invenio_gnd)
        print(f"  {len(inv)} subjects")
    with tempfile.TemporaryDirectory() as tmp:
        dump = timed(f"write {AUTHORITY_RECORDS:,} authority records",
                     lambda: write_authority_dump(
                         Path(tmp) / "authorities-gnd-sachbegriff_dnbmarc_test.mrc.xml.gz"))
        print(f"  {dump.stat().st_size / 1e6:.1f} MB gzipped")
        # a fresh process: its peak RSS is the load's alone
        subprocess.run([sys.executable, "-m", __spec__.name, "--authority-file", str(dump)],
                       check=True)


if __name__ == "__main__":
    main()
